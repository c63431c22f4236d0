"""A live stack (Daphne, Celery worker, real agents) over the test database."""
from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from apps.pool.models import Gpu
from e31site.devstack import LocalStack

E2E_REDIS_DB = 14


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def stack(transactional_db, tmp_path):
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("end-to-end tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}"
    live = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp_path / "var",
                      agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB")],
                      env={"E31_GRACE_S": "2"})
    live.start()
    try:
        live.wait_for(lambda: Gpu.objects.count() == 6, timeout=30)
        yield live
    finally:
        live.stop()


@pytest.fixture(autouse=True)
def _meter_check_after_the_stack(request):
    """After each test on the live stack (its processes stopped, before the database is flushed),
    ``manage.py meter_check`` must find the ledger consistent (SPEC §4 invariants)."""
    if "stack" not in request.fixturenames:
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
