from django.apps import AppConfig


class NoticesConfig(AppConfig):
    name = "apps.notices"
    verbose_name = "Notices"

    def ready(self) -> None:
        from . import receivers

        receivers.connect()
