"""Readiness checks: does this web process's database, Redis and storage answer, and is the schema current.

Each check answers ``True`` or ``False`` within about a second and never raises; what went wrong is
logged here, never shown to the prober (``/readyz`` is unauthenticated). Kubernetes' liveness and
readiness split is the model: https://kubernetes.io/docs/reference/using-api/health-checks/
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 1.0
ANSWER_KEPT_S = 2.0  # one answer serves every probe for this long: a flood of /readyz costs one check
_schema_current = False  # once the schema is current it stays so for this process (a deploy starts new ones)
_storage_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz-storage")
_kept: tuple[float, dict[str, bool]] | None = None
_kept_lock = threading.Lock()


def database_answers() -> bool:
    """``SELECT 1`` on the default database."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone() == (1,)


def redis_answers() -> bool:
    """``PING`` to ``REDIS_URL`` (the channel layer and the broker); ``True`` where none is configured
    (standalone runs on an in-memory layer and eager tasks)."""
    if not settings.REDIS_URL:
        return True
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=CHECK_TIMEOUT_S,
                                  socket_connect_timeout=CHECK_TIMEOUT_S)
    try:
        return bool(client.ping())
    finally:
        client.close()


def storage_answers() -> bool:
    """The default storage (file system or S3) answers a lookup of a name that need not exist, within
    :data:`CHECK_TIMEOUT_S` (boto's own timeouts are far longer; a lookup still running is waited
    on by the next check, never started twice)."""
    try:
        _storage_pool.submit(default_storage.exists, "readyz-probe").result(timeout=CHECK_TIMEOUT_S)
    except FutureTimeout:
        return False
    return True


def schema_current() -> bool:
    """No migration left to apply on the default database (cached once true)."""
    global _schema_current
    if not _schema_current:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        _schema_current = not executor.migration_plan(executor.loader.graph.leaf_nodes())
    return _schema_current


CHECKS: dict[str, Callable[[], bool]] = {
    "database": database_answers,
    "redis": redis_answers,
    "storage": storage_answers,
    "migrations": schema_current,
}


def readiness() -> dict[str, bool]:
    """Every check by name, ``True`` where it passed; a check that raises counts as failed (logged).
    An answer is kept :data:`ANSWER_KEPT_S` seconds and probes meanwhile share it."""
    global _kept
    with _kept_lock:
        if _kept is not None and time.monotonic() - _kept[0] < ANSWER_KEPT_S:
            return dict(_kept[1])
        results = _run_checks()
        _kept = (time.monotonic(), results)
        return dict(results)


def _run_checks() -> dict[str, bool]:
    results: dict[str, bool] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = bool(check())
        except Exception:  # a probe reports, it does not fail
            log.warning("readiness check %s failed", name, exc_info=True)
            results[name] = False
    return results
