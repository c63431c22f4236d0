"""Push committed changes to the browsers watching them (issue 5, docs/live.md).

Every function here is called *inside* the transaction that makes the change
and sends nothing until it commits (``transaction.on_commit``): a rolled-back
change is never shown, and what is sent is read after the commit, so it is
at least as new as the change. The callbacks are ``robust``: a push that
fails is logged and never stops the hooks registered after it (the
scheduling cycle a release asks for). Web processes and Celery workers alike send
through the channel layer (Redis in production, so a change made in a worker
reaches a socket held by any Daphne process).

Groups (channel-layer names):

- ``job-<id>``: the job page's sockets (the owner's only); the page's
  fragments after each event, log chunks, staging progress.
- ``user-<id>``: every live page of that user; one row of "My jobs" per
  changed job, and the scheduler's position/estimate updates, one message
  per user per cycle.
- ``pool`` / ``pool-staff``: the pool page; the staff part (nodes, queue)
  only to staff sockets.

A message is ``{"type": "live.html", "html": "..."}``: fragments the
consumer forwards unchanged. Several changes of one job (or of the pool) in
one transaction send one message.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

log = logging.getLogger(__name__)

MESSAGE_TYPE = "live.html"  # handled by the consumers' live_html()
SEND_TIMEOUT_S = 5.0


def job_group(job_id: int) -> str:
    """Channel-layer group of the sockets showing job ``job_id``'s page."""
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    """Channel-layer group of every live socket of user ``user_id``."""
    return f"user-{user_id}"


POOL_GROUP = "pool"
POOL_STAFF_GROUP = "pool-staff"


# --- after commit, once per transaction -------------------------------------
def _once_on_commit(key: str, func: Callable[[], None]) -> None:
    """``transaction.on_commit(func)`` unless a callback with ``key`` is already waiting.

    Outside a transaction (autocommit) ``func`` runs at once, as on_commit does.
    """
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        if any(getattr(f, "e31_live_key", None) == key for _, f, _ in connection.run_on_commit):
            return
        func.e31_live_key = key  # type: ignore[attr-defined]
    transaction.on_commit(func, robust=True)


def job_changed(job_id: int) -> None:
    """After commit: push job ``job_id``'s page fragments and its "My jobs" row.

    Called by :func:`apps.jobs.state.event_add` (every state change and
    timeline event), by submit, and by staging progress.
    """
    _once_on_commit(f"job-{job_id}", lambda: publish_job(job_id))


def pool_changed() -> None:
    """After commit: push the pool page (GPUs free or queue length may have changed)."""
    _once_on_commit("pool", publish_pool)


def log_chunk_added(job_id: int, *, attempt: int, offset: int, data: bytes, log_size: int) -> None:
    """After commit: push ``data``, stored at byte ``offset`` of the attempt's log, to the job page."""
    def send() -> None:
        from .fragments import render_log_chunk

        html = render_log_chunk(job_id, attempt=attempt, offset=offset, data=data, version=log_size)
        _send([(job_group(job_id), html)])

    transaction.on_commit(send, robust=True)


def queue_changed(job_ids: Iterable[int]) -> None:
    """After commit: push the new queue positions/estimates/reasons of ``job_ids``, one message per owner."""
    ids = list(job_ids)
    if ids:
        transaction.on_commit(lambda: publish_queue(ids), robust=True)


# --- rendering and sending ---------------------------------------------------
def publish_job(job_id: int) -> None:
    """Render job ``job_id``'s page fragments and row as they are now and send them."""
    from apps.metering.accounts import user_tz

    from .fragments import render_job_fragments, render_row, stamp_ms
    from .models import Job

    stamp = stamp_ms()  # before the read: a later read always carries a later stamp
    job = Job.objects.filter(pk=job_id).select_related("owner").prefetch_related("leases").first()
    if job is None:
        return
    with timezone.override(user_tz(job.owner)):  # only the owner sees these fragments
        page, row = render_job_fragments(job, with_log=False, stamp=stamp), render_row(job, stamp=stamp)
    _send([(job_group(job.pk), page)])  # the page first
    _send([(user_group(job.owner_id), row)])


def publish_queue(job_ids: list[int]) -> None:
    """Send each owner of ``job_ids`` one message: the queue part and the row of each of their jobs."""
    from apps.metering.accounts import user_tz

    from .fragments import render_row, render_status, stamp_ms
    from .models import Job

    stamp = stamp_ms()
    by_owner: dict[int, list[str]] = defaultdict(list)
    for job in Job.objects.filter(pk__in=job_ids).select_related("owner").prefetch_related("leases").order_by("pk"):
        with timezone.override(user_tz(job.owner)):
            by_owner[job.owner_id] += [render_status(job, stamp=stamp), render_row(job, stamp=stamp)]
    _send([(user_group(owner), "".join(parts)) for owner, parts in by_owner.items()])


def publish_pool() -> None:
    """Render the pool page's fragments as they are now and send them (staff part to staff only)."""
    from apps.pool.fragments import render_pool, render_staff

    from .fragments import stamp_ms

    stamp = stamp_ms()
    _send([(POOL_GROUP, render_pool(stamp=stamp)), (POOL_STAFF_GROUP, render_staff(stamp=stamp))])


def _send(messages: list[tuple[str, str]]) -> None:
    """Send ``(group, html)`` pairs, in order; waits until the layer has them (at most
    :data:`SEND_TIMEOUT_S`). A failure is logged, never raised: the change is committed, and a
    lost push costs only freshness until the page's next snapshot."""
    layer = get_channel_layer()
    if layer is None or not messages:
        return

    async def send_all() -> None:
        for group, html in messages:
            await layer.group_send(group, {"type": MESSAGE_TYPE, "html": html})

    try:
        if type(layer).__module__.startswith("channels_redis"):
            asyncio.run_coroutine_threadsafe(send_all(), _sender_loop()).result(SEND_TIMEOUT_S)
        else:
            # The in-memory layer (standalone, one process) holds asyncio queues of the
            # server's loop: send from there (async_to_sync finds it), never from another loop.
            async_to_sync(send_all)()
    except Exception:
        log.warning("could not push a live update to %s", [g for g, _ in messages], exc_info=True)


_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_loop_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for sending to Redis, in a daemon thread of its own.

    ``async_to_sync`` from plain sync code (a Celery task, an agent report)
    starts a new event loop per call, and channels-redis opens a new Redis
    connection per loop: ~8 ms a push. One long-lived loop keeps its
    connection. Made per process id, so a forked worker gets its own.
    """
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="e31-live-sender", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]
