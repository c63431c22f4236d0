"""Shared fixtures: an owner, a stranger, their API clients, a small pool."""
import socket
import threading

import pytest
from rest_framework.test import APIClient

from .clock import frozen_clock  # noqa: F401  (a fixture for every test)
from .cycles import HarnessCycles
from .factories import UserFactory, node_with_gpus
from .s3 import s3_endpoint, s3_storage  # noqa: F401  (fixtures: a real S3-compatible server, tests/s3.py)


@pytest.fixture
def owner(db):
    return UserFactory(username="owner")


@pytest.fixture
def stranger(db):
    return UserFactory(username="stranger")


@pytest.fixture
def pool(db):
    """node-a: 4 x H100-80GB; node-b: 2 x A100-40GB."""
    return [node_with_gpus("node-a", count=4), node_with_gpus("node-b", count=2, model="A100-40GB",
                                                              memory_mb=40960)]


@pytest.fixture(autouse=True)
def cycles():
    """The scheduling cycles commits ask for run here, after the request that asked (tests/cycles.py)."""
    harness = HarnessCycles()
    harness.install()
    yield harness
    harness.uninstall()


@pytest.fixture(autouse=True)
def _media_in_tmp(settings, tmp_path):
    """Uploads and bundles written by a test stay in its own directory, and so does the secrets key."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.E31_SECRETS_KEY_FILE = tmp_path / "secrets_key"


@pytest.fixture
def api(owner):
    """The API as ``owner``."""
    client = APIClient()
    client.force_authenticate(owner)
    return client


@pytest.fixture
def stranger_api(stranger):
    """The API as ``stranger``."""
    client = APIClient()
    client.force_authenticate(stranger)
    return client


@pytest.fixture
def silent_mail_server():
    """The port of a TCP server on 127.0.0.1 that accepts and never greets (an SMTP server that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()
