"""Shared fixtures: an owner, a stranger, a small pool."""
import pytest

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
