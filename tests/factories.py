"""Factories for tests: users, nodes with GPUs, jobs through the real submit service."""
from __future__ import annotations

import functools
import itertools
from importlib import import_module

import factory
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.management import call_command
from django.utils import timezone

from apps.core.choices import NodeState
from apps.pool.models import Gpu, Node

_uuid = itertools.count(1)
PASSWORD = "pw-for-tests"


@functools.cache
def _password_hash() -> str:
    """One PBKDF2 hash of :data:`PASSWORD` per test process, shared by every user it makes: the
    site's hasher (so live servers started by a test verify it), paid once instead of ~0.3 s per user."""
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.LazyFunction(_password_hash)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    state = NodeState.UP
    hostname = factory.LazyAttribute(lambda o: f"{o.name}.local")
    cpus = 32
    memory_bytes = 256 * 10**9
    disk_bytes = 10**12
    simulated = True
    last_heartbeat_at = factory.LazyFunction(timezone.now)
    registered_at = factory.LazyFunction(timezone.now)
    first_registered_at = factory.LazyAttribute(lambda o: o.registered_at)


def node_with_gpus(name: str | None = None, *, count: int = 4, model: str = "H100-80GB",
                   memory_mb: int = 81559, **kwargs) -> Node:
    """A node that is up with ``count`` GPUs of ``model``."""
    node = NodeFactory(**({"name": name} if name else {}), **kwargs)
    Gpu.objects.bulk_create([
        Gpu(node=node, index=i, uuid=f"GPU-test-{next(_uuid)}", model=model, memory_mb=memory_mb)
        for i in range(count)
    ])
    return node


def spec(**overrides) -> dict:
    """A valid spec document (SPEC §2); top-level parts replaced by ``overrides``."""
    doc = {
        "name": "test-job",
        "work": {"command": "echo hello", "kind": "other"},
        "compute": {"gpus": 1, "time_limit": "10m"},
        "output": {"paths": ["out/**"]},
    }
    doc.update(overrides)
    return doc


def flush_database() -> None:
    """Empty every table as ``transactional_db`` does, then put back what the migrations seed (the
    default GPU rates of ``metering/0002``), so the tests that run after a module-scoped live stack
    find the database a fresh test database would be."""
    call_command("flush", interactive=False, verbosity=0, reset_sequences=False)  # ids go on (tests/workers.py)
    seed_rates()


def seed_rates() -> None:
    """Put back the default GPU rates that ``metering/0002`` seeds (a flush removed them)."""
    import_module("apps.metering.migrations.0002_default_rates").add_rates(django_apps, None)
