"""Celery tasks of the pool. Thin: each calls one service."""
from __future__ import annotations

import logging
from functools import cache

from celery import shared_task
from django.conf import settings
from django.db import transaction

from .scheduling import schedule_cycle
from .services import nodes_mark_lost

log = logging.getLogger(__name__)
PENDING_KEY = "e31:schedule-cycle-pending"
PENDING_TTL_MS = 10_000


@cache
def _redis():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL)


@shared_task(ignore_result=True)
def schedule_cycle_task() -> None:
    """One scheduling cycle (idempotent: a repeated cycle only re-plans)."""
    if settings.REDIS_URL and not settings.CELERY_TASK_ALWAYS_EAGER:
        # Clear the mark first: an event after this point asks for a new cycle.
        _redis().delete(PENDING_KEY)
    schedule_cycle()


@shared_task(ignore_result=True)
def node_watch_task() -> None:
    """Mark silent nodes down, requeue their jobs; end jobs past their time limit."""
    from apps.jobs.services.limits import jobs_enforce_time_limits

    nodes_mark_lost()
    jobs_enforce_time_limits()


def _send_cycle() -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        # No broker: this process's coalescing loop runs it, never the caller
        # (a web request's commit hook must not run a cycle).
        from .cycle_loop import cycle_wanted

        cycle_wanted()
        return
    if settings.REDIS_URL:
        # Coalesce bursts: while one cycle is queued and not started, events
        # ask for nothing more (SET NX); the queued cycle will see them all.
        # The TTL bounds the damage of a lost task: the next event re-asks.
        try:
            if not _redis().set(PENDING_KEY, 1, nx=True, px=PENDING_TTL_MS):
                return
        except Exception:  # Redis trouble: fall through and enqueue anyway
            log.warning("could not coalesce the scheduling cycle", exc_info=True)
    schedule_cycle_task.delay()


def enqueue_schedule_cycle() -> None:
    """Ask for a scheduling cycle once the current transaction commits.

    Costs the caller one small message at most (a Redis SET NX and a Celery task, or
    an event set for the local loop in eager mode); the cycle runs elsewhere.
    """
    transaction.on_commit(_send_cycle)
