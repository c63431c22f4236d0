"""A live stack (uvicorn, Celery worker, real agents) over the test database: ``stack``, one per
module, shared by its tests (reset between them); :func:`live_stack` for the other shapes."""
from __future__ import annotations

import io
import os

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from apps.pool.models import Gpu
from devstack import LocalStack
from tests import workers
from tests.factories import flush_database

# The live stacks' Redis database: this worker's (tests/workers.py sets the environment).
E2E_REDIS_DB = int(os.environ.get("E31_E2E_REDIS_DB", workers.DEFAULT_E2E_REDIS_DB))


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def live_stack(tmp_path, *, redis_url: str, web: int = 1, env: dict[str, str] | None = None, **shape):
    """A started :class:`LocalStack` (node-a 4 x H100, node-b 2 x A100, 2 s grace) on the test
    database; yields it once both agents registered, stops it after. ``env``: more environment
    for every process (e.g. ``E31_STORAGE_URL``); ``shape``: more :class:`LocalStack` arguments
    (``workers``, ``split_workers``, ``spread_agents``)."""
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("live-stack tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
    live = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp_path / "var",
                      agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB")], web=web,
                      env={"E31_GRACE_S": "2", **(env or {})}, **shape)
    live.start()
    try:
        live.wait_for(lambda: Gpu.objects.count() == 6, timeout=30)
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def module_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """One plain stack for the module's tests (starting one takes ~10 s); the database is open to
    them while it runs, and emptied again after it (:func:`tests.factories.flush_database`)."""
    with django_db_blocker.unblock():
        try:
            yield from live_stack(tmp_path_factory.mktemp("stack"), redis_url=workers.e2e_redis_url())
            meter_check("after the module's stack stopped")
        finally:
            flush_database()


@pytest.fixture
def stack(module_stack, django_db_blocker):
    """The module's shared stack (:func:`module_stack`). After each test: every job it left
    unreleased is cancelled and waited for, then ``manage.py meter_check`` must pass. What the test
    made stays until the module ends, so each test signs in its own user and reads its own jobs."""
    with django_db_blocker.unblock():
        yield module_stack
        stack_reset(module_stack)
        meter_check("after the end-to-end test")


def stack_reset(live: LocalStack, timeout: float = 60) -> None:
    """Cancel every job not yet released and wait until all are released (the agents stopped them).

    Raises:
        TimeoutError: not all released within ``timeout`` seconds.
    """
    from apps.core.choices import JobState
    from apps.jobs.models import Job
    from apps.jobs.services.cancel import job_cancel

    for job in Job.objects.exclude(state=JobState.RELEASED):
        job_cancel(job=job)
    live.wait_for(lambda: not Job.objects.exclude(state=JobState.RELEASED).exists(), timeout=timeout)


def meter_check(when: str) -> None:
    """``manage.py meter_check`` must find the ledger consistent (SPEC §4 invariants), else the test fails."""
    err = io.StringIO()
    try:
        call_command("meter_check", stdout=io.StringIO(), stderr=err)
    except CommandError as exc:
        pytest.fail(f"meter_check {when}: {exc}\n{err.getvalue()}")


@pytest.fixture(autouse=True)
def _meter_check_after_the_stack(request):
    """After each test on a stack of its own (``stack_with``: tests/faults; its processes stopped,
    before the database is flushed), ``manage.py meter_check`` must find the ledger consistent.
    The module's shared ``stack`` checks after each test itself (:func:`stack`)."""
    if "stack_with" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("transactional_db")  # set up first, so flushed after this check
    yield
    meter_check("after the end-to-end test")
