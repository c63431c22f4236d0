"""Shared fixtures: an owner, a stranger, their API clients, a small pool."""
import pytest
from rest_framework.test import APIClient

from .cycles import HarnessCycles
from .factories import UserFactory, node_with_gpus


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
    """Uploads and bundles written by a test stay in its own directory."""
    settings.MEDIA_ROOT = str(tmp_path / "media")


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
