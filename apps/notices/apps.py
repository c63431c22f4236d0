from django.apps import AppConfig


class NoticesConfig(AppConfig):
    name = "apps.notices"
    verbose_name = "Notices"

    def ready(self) -> None:
        from . import receivers  # here, not at the top: it imports models, not loaded when apps.py is

        receivers.connect()
