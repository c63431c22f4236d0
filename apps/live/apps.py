from django.apps import AppConfig


class LiveConfig(AppConfig):
    """Live pages: pushes after commit (:mod:`.push`) and the WebSocket consumers (:mod:`.consumers`)."""

    name = "apps.live"
    label = "live"
    verbose_name = "Live pages"

    def ready(self) -> None:
        from . import receivers  # here, not at the top: it imports models, not loaded when apps.py is

        receivers.connect()
