"""Celery tasks of the pool. Thin: each calls one service."""
from __future__ import annotations

from celery import shared_task
from django.db import transaction

from .scheduling import schedule_cycle
from .services import nodes_mark_lost


@shared_task(ignore_result=True)
def schedule_cycle_task() -> None:
    """One scheduling cycle (idempotent: a repeated cycle only re-plans)."""
    schedule_cycle()


@shared_task(ignore_result=True)
def node_watch_task() -> None:
    """Mark silent nodes down, requeue their jobs; end jobs past their time limit."""
    from apps.jobs.services import jobs_enforce_time_limits

    nodes_mark_lost()
    jobs_enforce_time_limits()


def enqueue_schedule_cycle() -> None:
    """Ask for a scheduling cycle once the current transaction commits."""
    transaction.on_commit(schedule_cycle_task.delay)
