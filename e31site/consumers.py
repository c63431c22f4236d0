"""WebSocket consumers shared by the site."""
from channels.generic.websocket import WebsocketConsumer


class RefuseConsumer(WebsocketConsumer):
    """Closes every connection at once, sending no data (an unknown path or a refused user)."""

    def connect(self) -> None:
        self.close()
