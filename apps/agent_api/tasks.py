"""Celery tasks of the agent protocol's app (the default ``side`` queue). Thin: each calls one service."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from .retention import sweep_storage

log = logging.getLogger(__name__)


@shared_task(ignore_result=True, soft_time_limit=settings.E31_SWEEP_SOFT_TIME_LIMIT_S,
             time_limit=settings.E31_SWEEP_TIME_LIMIT_S)
def sweep_storage_task() -> None:
    """The daily storage sweep (:func:`apps.agent_api.retention.sweep_storage`); Celery beat runs it
    every ``E31_SWEEP_PERIOD_S``. Its own time limits (seconds, ``E31_SWEEP_*TIME_LIMIT_S``): a large
    store takes longer than the site's default task limit."""
    report = sweep_storage()
    for line in report.lines():
        log.info("sweep_storage: %s", line)
