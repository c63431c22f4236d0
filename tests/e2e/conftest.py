"""A live stack (uvicorn, Celery worker, real agents) over the test database."""
from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import connection

from apps.pool.models import Gpu
from devstack import LocalStack

E2E_REDIS_DB = int(os.environ.get("E31_E2E_REDIS_DB", "14"))  # a parallel run picks another


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def node_token(name: str) -> str:
    """A node's agent token, issued in the test process on the test database (the stack's
    ``issue_token``: no ``manage.py`` start-up per stack)."""
    from apps.pool.services import node_token_issue

    return node_token_issue(name=name)


def live_stack(tmp_path, *, redis_url: str, web: int = 1, env: dict[str, str] | None = None, **shape):
    """A started :class:`LocalStack` (node-a 4 x H100, node-b 2 x A100, 2 s grace) on the test
    database; yields it once both agents registered, stops it after. ``env``: more environment
    for every process (e.g. ``E31_STORAGE_URL``); ``shape``: more :class:`LocalStack` arguments
    (``workers``, ``split_workers``, ``spread_agents``)."""
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("live-stack tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
    live = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp_path / "var",
                      agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB")], web=web, issue_token=node_token,
                      env={"E31_GRACE_S": "2", **(env or {})}, **shape)
    live.start()
    try:
        live.wait_for(lambda: Gpu.objects.count() == 6, timeout=30)
        yield live
    finally:
        live.stop()


@pytest.fixture
def stack(transactional_db, tmp_path):
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}" if settings.REDIS_URL else ""
    yield from live_stack(tmp_path, redis_url=redis_url)


@pytest.fixture(autouse=True)
def _meter_check_after_the_stack(request):
    """After each test on the live stack (its processes stopped, before the database is flushed),
    ``manage.py meter_check`` must find the ledger consistent (SPEC §4 invariants)."""
    if not {"stack", "stack_with"} & set(request.fixturenames):  # stack_with: tests/faults
        yield
        return
    request.getfixturevalue("transactional_db")  # set up first, so flushed after this check
    yield
    import io

    from django.core.management import CommandError, call_command

    err = io.StringIO()
    try:
        call_command("meter_check", stdout=io.StringIO(), stderr=err)
    except CommandError as exc:
        pytest.fail(f"meter_check after the end-to-end test: {exc}\n{err.getvalue()}")
