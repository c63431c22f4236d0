"""Shared fixtures: an owner, a stranger, their API clients, a small pool."""
import socket
import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from . import workers
from .clock import frozen_clock  # noqa: F401  (a fixture for every test)
from .cycles import HarnessCycles
from .factories import UserFactory, node_with_gpus, seed_rates
from .s3 import s3_endpoint, s3_storage  # noqa: F401  (fixtures: a real S3-compatible server, tests/s3.py)

workers.use_worker_redis()  # under pytest-xdist: this worker's Redis numbers (tests/workers.py)


if workers.ID_OFFSET:
    @pytest.fixture(scope="session")
    def django_db_setup(django_db_setup, django_db_blocker):
        """pytest-django's test database (``test_<name>_gwN`` under xdist), its ids from this worker's
        offset (tests/workers.py)."""
        with django_db_blocker.unblock():
            workers.offset_sequences(connection)


@pytest.fixture(autouse=True)
def _seeded_rates(request):
    """A test with the database finds the GPU rates the migrations seed (``metering/0002``), as a
    fresh test database has them: a ``transactional_db`` test before it emptied every table. Serially
    pytest-django runs those last; under pytest-xdist a worker runs module after module, so a module's
    ``db`` tests may come after another module's table truncation."""
    marker = request.node.get_closest_marker("django_db")
    if not (marker or {"db", "transactional_db"} & set(request.fixturenames)):
        return
    if marker is not None and marker.kwargs.get("databases") == []:
        return  # django_db(databases=[]): a test that must not touch the database at all
    request.getfixturevalue("db")  # transactional when the test asks for it (pytest-django decides)
    from apps.metering.models import GpuRate

    if not GpuRate.objects.exists():
        seed_rates()


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


def pytest_collection_modifyitems(items):
    """The modules that start real processes (marked ``e2e``, the slowest: 10 s to minutes each) run
    first, so that under pytest-xdist (``--dist loadfile``) they spread over both workers from the
    start and the quick modules fill in after, instead of one worker running the last live modules
    alone. A module's tests stay together and in their order."""
    live_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: (item.nodeid.split("::")[0] not in FIRST_IN_THEIR_PROCESS,
                                 item.nodeid.split("::")[0] not in live_files))


# Modules that run first, in a process no other module has used: test_live_consumers drives the ASGI
# app in-process (asgiref's sync-to-async executors); after other modules in the same process it was
# seen to hang 60 s in its first session lookup (twice in about five whole runs, never alone or
# first; the cause is not found yet: issue 22 note).
FIRST_IN_THEIR_PROCESS = frozenset({"tests/web/test_live_consumers.py"})
