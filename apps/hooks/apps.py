from django.apps import AppConfig


class HooksConfig(AppConfig):
    name = "apps.hooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import receivers  # here, not at the top: it imports models, not loaded when apps.py is

        receivers.connect()
