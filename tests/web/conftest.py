"""Fixtures of the browser tests: a user, a stranger, staff, a node of 4 x H100-80GB."""
import pytest
from django.test import Client

from .factories import UserFactory, node_with_gpus


@pytest.fixture
def user(db):
    return UserFactory(username="alice")


@pytest.fixture
def stranger_user(db):
    return UserFactory(username="mallory")


@pytest.fixture
def staff_user(db):
    return UserFactory(username="operator", is_staff=True)


@pytest.fixture
def node(db):
    """One node that is up, with 4 x H100-80GB: enough for the examples and small specs."""
    return node_with_gpus(count=4, model="H100-80GB", memory_mb=81559)


def signed_in(user) -> Client:
    """A browser signed in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def web(user):
    return signed_in(user)


@pytest.fixture
def stranger_web(stranger_user):
    return signed_in(stranger_user)


@pytest.fixture
def staff_web(staff_user):
    return signed_in(staff_user)
