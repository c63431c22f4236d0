"""Celery tasks of webhooks, on the side queue (the default route: ``CELERY_TASK_ROUTES`` sends only the
scheduling and jobs tasks to ``core``). Thin: each calls one function, with ids, not objects; each is
idempotent (a delivery's try is claimed, an event is recorded once).

Where Celery is eager (standalone: one process, no worker) a task would run inside the commit that asked
for it, so an agent's report or the beat thread would wait on a receiver; there
(``E31_WEBHOOK_SEND_IN_THREAD``, on by default with eager Celery) each try runs on a small thread pool of
this process instead, one try per worker thread.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from celery import shared_task
from django.conf import settings
from django.db import connection

from . import delivery, events

log = logging.getLogger(__name__)

SEND_THREADS = 8
_pool: list[ThreadPoolExecutor] = []
_pool_lock = threading.Lock()


@shared_task(ignore_result=True)
def webhook_deliver_task(delivery_id: int) -> None:
    """One try of delivery ``delivery_id`` (:func:`.delivery.delivery_try`)."""
    delivery.delivery_try(delivery_id)


@shared_task(ignore_result=True)
def webhook_array_check_task(array_id: int) -> None:
    """Record and send ``array_finished`` of array ``array_id`` if every task is released."""
    enqueue_deliveries(events.array_finished_record(array_id))


@shared_task(ignore_result=True)
def webhook_sweep_task() -> None:
    """Queue a try of every delivery due (retries, and first tries whose task was lost); Celery beat runs
    it every ``E31_WEBHOOK_SWEEP_PERIOD_S``."""
    due = delivery.deliveries_due()
    if due:
        log.info("webhook sweep: %s deliveries due", len(due))
    enqueue_deliveries(due)


def _try_in_thread(delivery_id: int) -> None:
    try:
        delivery.delivery_try(delivery_id)
    except Exception:
        log.exception("webhook delivery %s failed; the sweep tries it again", delivery_id)
    finally:
        connection.close()  # this thread's own connection


def _thread_pool() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=SEND_THREADS, thread_name_prefix="e31-webhook"))
        return _pool[0]


def enqueue_deliveries(delivery_ids: Iterable[int]) -> None:
    """Queue a try of each delivery (after the commit that wrote them), on the side queue or, with
    ``E31_WEBHOOK_SEND_IN_THREAD``, this process's webhook threads. Never raises: a delivery that cannot
    be queued is logged and left due, for the sweep."""
    for delivery_id in delivery_ids:
        if settings.E31_WEBHOOK_SEND_IN_THREAD:
            _thread_pool().submit(_try_in_thread, delivery_id)
            continue
        try:
            webhook_deliver_task.delay(delivery_id)
        except Exception:
            log.exception("webhook delivery %s could not be queued; the sweep tries it", delivery_id)


def enqueue_array_checks(array_ids: Iterable[int]) -> None:
    """Queue :func:`webhook_array_check_task` for each array (after the commit of a task's release).
    Never raises (logged)."""
    for array_id in array_ids:
        try:
            webhook_array_check_task.delay(array_id)
        except Exception:
            log.exception("webhook array check of array %s could not be queued", array_id)
