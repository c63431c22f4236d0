"""Until live pages exist, every WebSocket is closed before any data, never a 500."""
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from e31site.asgi import application


async def _connect(path: str) -> bool:
    comm = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://127.0.0.1"),
                                                              (b"host", b"127.0.0.1")])
    connected, _ = await comm.connect()
    await comm.disconnect()
    return connected


def test_sockets_are_refused_cleanly():
    for path in ("/ws/jobs/", "/ws/jobs/4/", "/nonsense"):
        assert async_to_sync(_connect)(path) is False
