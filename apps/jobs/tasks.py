"""Celery tasks of the jobs app (queue "core"). Thin: each calls services."""
from __future__ import annotations

from celery import shared_task

from apps.pool.services import nodes_mark_lost

from .services.logs import log_compact
from .services.time_limits import jobs_enforce_time_limits


@shared_task(ignore_result=True)
def node_watch_task() -> None:
    """Mark silent nodes down, requeue their jobs; end jobs past their time limit."""
    nodes_mark_lost()
    jobs_enforce_time_limits()


@shared_task(ignore_result=True)
def log_compact_task(job_id: int) -> None:
    """Compact a released job's log chunks into one storage object per attempt."""
    log_compact(job_id)
