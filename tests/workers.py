"""Each pytest-xdist worker on services of its own (``make test`` runs ``-n 2``).

- Database: pytest-django gives worker ``gwN`` the test database ``test_<name>_gwN`` itself.
- Redis: the run's ``REDIS_URL`` database ``A`` and ``E31_E2E_REDIS_DB`` ``B`` (the live stacks'
  channel layer and broker; default 14) belong to worker ``gw0``; worker ``gwN`` uses ``A - 2N``
  and ``B - 2N`` (``make test``: gw0 15 and 14, gw1 13 and 12). A run without xdist uses A and B.
- Ids: worker ``gwN``'s database sequences start at ``(N + 1) * 1,000,000``, so two workers never
  have a job of the same id at once: the fault drills find a job's processes on the machine by its
  id (the agent's ``E31_RUN_MARKER``, ``E31_JOB_ID``), and the other worker's job of that id would
  be taken for a leftover. Standalone runs (SQLite, ids from 1) stay below every offset.

Settings read ``REDIS_URL`` when Django starts, before any conftest is imported, so
:func:`use_worker_redis` points the settings that derive from it (channel layer, broker) at the
worker's database before any test opens a connection; it also sets the environment, so that the
processes the tests start inherit the worker's numbers.
"""
from __future__ import annotations

import os

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1"...; "" without xdist
INDEX = int(WORKER[2:]) if WORKER.startswith("gw") and WORKER[2:].isdigit() else 0
# E31_TEST_ID_OFFSET: another whole run on this machine at once (a second checkout) takes its own range.
ID_OFFSET = int(os.environ.get("E31_TEST_ID_OFFSET", "0")) + ((INDEX + 1) * 1_000_000 if WORKER else 0)
DEFAULT_E2E_REDIS_DB = 14


def _with_db(url: str, number: int) -> str:
    """``url`` (``redis://host:port/N``) on Redis database ``number``."""
    return url.rsplit("/", 1)[0] + f"/{number}"


def _db_of(url: str) -> int:
    tail = url.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def use_worker_redis() -> None:
    """Point ``REDIS_URL`` (settings and environment) and ``E31_E2E_REDIS_DB`` at this worker's numbers.

    Raises:
        RuntimeError: a worker's number would fall below 0 (more workers than Redis databases).
    """
    if not WORKER:
        return
    from django.conf import settings

    e2e = int(os.environ.get("E31_E2E_REDIS_DB", DEFAULT_E2E_REDIS_DB)) - 2 * INDEX
    os.environ["E31_E2E_REDIS_DB"] = str(e2e)
    url = os.environ.get("REDIS_URL", "")
    if not url:
        return
    number = _db_of(url) - 2 * INDEX
    if min(number, e2e) < 0:
        raise RuntimeError(f"worker {WORKER}: no Redis database left (REDIS_URL /{number}, E2E /{e2e})")
    url = _with_db(url, number)
    os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    layer = settings.CHANNEL_LAYERS["default"]
    if layer["BACKEND"].startswith("channels_redis"):
        settings.CHANNEL_LAYERS = {**settings.CHANNEL_LAYERS, "default": {
            **layer, "CONFIG": {**layer["CONFIG"], "hosts": [{**layer["CONFIG"]["hosts"][0], "address": url}]}}}
    from e31site.celery import app

    app.conf.broker_url = url


def e2e_redis_url() -> str:
    """The Redis URL of the live stacks this worker starts (``""`` without ``REDIS_URL``)."""
    from django.conf import settings

    if not settings.REDIS_URL:
        return ""
    return _with_db(settings.REDIS_URL, int(os.environ.get("E31_E2E_REDIS_DB", DEFAULT_E2E_REDIS_DB)))


def offset_sequences(connection) -> None:
    """Start every sequence of the test database at :data:`ID_OFFSET` (PostgreSQL; no-op at offset 0)."""
    if not ID_OFFSET or connection.vendor != "postgresql":
        return
    with connection.cursor() as cur:
        cur.execute("SELECT schemaname, sequencename FROM pg_sequences WHERE schemaname = current_schema()")
        for schema, name in cur.fetchall():
            cur.execute("SELECT setval(%s, %s, false)", [f'"{schema}"."{name}"', ID_OFFSET])
