from django.apps import AppConfig


class TokensConfig(AppConfig):
    name = "apps.tokens"
    verbose_name = "API tokens"
    default_auto_field = "django.db.models.BigAutoField"
