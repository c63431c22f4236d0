from django.apps import AppConfig


class SecretsConfig(AppConfig):
    name = "apps.secrets"
    verbose_name = "Secrets"
    default_auto_field = "django.db.models.BigAutoField"
