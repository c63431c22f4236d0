"""Celery tasks of the artifacts (the default ``side`` queue). Thin: each calls one service."""
from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from . import direct

log = logging.getLogger(__name__)


@shared_task(ignore_result=True, soft_time_limit=settings.E31_BUNDLE_VERIFY_SOFT_TIME_LIMIT_S,
             time_limit=settings.E31_BUNDLE_VERIFY_TIME_LIMIT_S)
def bundle_verify_task(bundle_id: int, since: str, retention_days: int) -> None:
    """Verify a bundle uploaded straight to the object store (:func:`.direct.bundle_direct_verify`).

    Time limits: 6 h (``E31_BUNDLE_VERIFY_*TIME_LIMIT_S``: a 1 TB archive read at 50 MB/s), not the
    site's 60 s: verification is the one long task, and it runs off every request and row lock. The
    broker's visibility timeout lies above it (settings), so it is never handed to a second worker."""
    direct.bundle_direct_verify(bundle_id=bundle_id, since=since, retention_days=retention_days)


@shared_task(ignore_result=True)
def staging_sweep_task() -> None:
    """Drop stale unverified uploads from the store (:func:`.direct.staging_sweep`); beat runs it."""
    done = direct.staging_sweep()
    if any(done.values()):
        log.info("staging sweep: %s", done)


def enqueue_bundle_verify(sender: Any = None, *, bundle_id: int, since: str, retention_days: int,
                          **_: Any) -> None:
    """Receiver of :data:`.signals.bundle_verify_wanted`: queue :func:`bundle_verify_task` (eager
    Celery runs it here). Never raises: a bundle whose verification is never queued is dropped
    by the staging sweep, and the agent uploads it again."""
    try:
        bundle_verify_task.delay(bundle_id, since, retention_days)
    except Exception:
        log.exception("verification of bundle %s could not be queued", bundle_id)
