"""Fault cases of issue 12 on the production shape: uvicorn, a core and a side Celery worker,
beat, PostgreSQL, Redis and real agents; ``manage.py meter_check`` after each (tests/e2e/conftest.py)."""
from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import connection

from apps.pool.models import Node
from devstack import LocalStack
from tests.e2e.conftest import E2E_REDIS_DB, _meter_check_after_the_stack, database_url, node_token  # noqa: F401
from tests.e2e.test_faults import FAST


@pytest.fixture
def stack_with(transactional_db, tmp_path):
    """``stack_with(loss_timeout_s=..., env=..., agents=..., agent_args=...)``: a started
    production-shape stack (split workers, beat, fast clocks), stopped after the test."""
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("fault tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
    db = int(os.environ.get("E31_E2E_REDIS_DB", E2E_REDIS_DB))
    started: list[LocalStack] = []

    def make(*, loss_timeout_s: int = 30, env: dict[str, str] | None = None,
             agents: list[tuple[str, str]] | None = None, agent_args: list[str] | None = None) -> LocalStack:
        agents = agents or [("node-a", "1xH100-80GB")]
        live = LocalStack(database_url=database_url(), redis_url=settings.REDIS_URL.rsplit("/", 1)[0] + f"/{db}",
                          var_dir=tmp_path / "var", agents=agents, beat=True, split_workers=True,
                          env={**FAST, "E31_NODE_LOSS_TIMEOUT_S": str(loss_timeout_s), **(env or {})},
                          agent_args=list(agent_args or []), issue_token=node_token)
        started.append(live)
        live.start()
        names = [name for name, _ in agents]
        live.wait_for(lambda: Node.objects.filter(name__in=names, state="up").count() == len(names), timeout=30)
        return live

    yield make
    for live in started:
        live.stop()
