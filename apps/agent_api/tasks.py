"""Celery tasks of the agent protocol's app (the default ``side`` queue). Thin: each calls one service."""
from __future__ import annotations

import logging

from celery import shared_task

from .retention import sweep_storage

log = logging.getLogger(__name__)


@shared_task(ignore_result=True, soft_time_limit=3600, time_limit=3900)
def sweep_storage_task() -> None:
    """The daily storage sweep (:func:`apps.agent_api.retention.sweep_storage`); Celery beat runs it
    every ``E31_SWEEP_PERIOD_S``. Its own time limits (seconds): a large store takes longer than
    the site's default task limit."""
    report = sweep_storage()
    for line in report.lines():
        log.info("sweep_storage: %s", line)
