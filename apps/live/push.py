"""Tell the browsers watching a page that it changed (issue 5; issue 10, item 2; docs/live.md).

Every function here is called *inside* the transaction that makes the change
and sends nothing until it commits (``transaction.on_commit``): a rolled-back
change is never announced. What is sent is small: ``{"type": "live.changed",
"page": ..., "id": ..., "version": stamp_ms}``; nothing is rendered here. The
consumer holding a socket on that page (:mod:`apps.live.consumers.base`) reads and
renders the fragments for its own user when the message arrives, so a page
nobody watches costs one tiny message, and rendering reads what the database
holds after the commit. Messages to one group are coalesced: the first goes at
once, the ones that follow within :data:`COALESCE_S` are merged into one sent
when that time is up (at most a few a second per group and process). The
callbacks are ``robust`` and never wait for the send: a push that fails is
logged and costs only freshness until the page's next snapshot.

Groups (channel-layer names):

- ``user-<id>``: every live page of that user: "My jobs" and the user's job
  pages. ``page: "user"``, ``jobs``: the ids of the jobs that changed, or
  None for "any queued job of theirs" (a scheduling cycle that moved many).
- ``job-<id>``: the job page's sockets: new log bytes (``live.log``, the
  bytes themselves, rendered by the consumer).
- ``pool``: the pool page (``page: "pool"``); staff sockets also render the
  nodes and queue.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from apps.jobs.models import Job
from apps.projects.models import Membership

from . import seq as live_seq

log = logging.getLogger(__name__)

MESSAGE_TYPE = "live.changed"  # handled by the consumers' live_changed()
LOG_MESSAGE_TYPE = "live.log"  # handled by the consumers' live_log()
COALESCE_S = 0.25  # per group and process: at most one message per this many seconds, the last one late
MAX_JOB_IDS = 200  # a "user" message naming more jobs names none ("any queued job")


def job_group(job_id: int) -> str:
    """Channel-layer group of the sockets showing job ``job_id``'s page."""
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    """Channel-layer group of every live socket of user ``user_id``."""
    return f"user-{user_id}"


def project_group(project_id: int) -> str:
    """Channel-layer group of the live "My jobs" and job pages of a shared project's members: the
    owner's user group's messages about the project's jobs go here too (SPEC §9)."""
    return f"project-{project_id}"


def shared_project_ids(user_id: int) -> list[int]:
    """The ids of the shared (not personal) projects user ``user_id`` is a member of."""
    return list(Membership.objects.filter(user_id=user_id, project__personal_of__isnull=True)
                .values_list("project_id", flat=True))


POOL_GROUP = "pool"
POOL_STAFF_GROUP = "pool-staff"  # kept for older sockets; nothing is sent to it any more


def stamp_ms() -> int:
    """The message version: the server's clock in ms (as :func:`apps.web.jobs.fragments.stamp_ms`)."""
    return int(time.time() * 1000)


# --- after commit, once per transaction -------------------------------------
class _Batch:
    """The sends one transaction asked for, by key; run once, by its commit."""

    def __init__(self) -> None:
        self.sends: dict[str, Callable[[], None]] = {}
        self.done = False

    def flush(self) -> None:
        self.done = True
        for key, func in self.sends.items():
            _run(key, func)


def _run(key: str, func: Callable[[], None]) -> None:
    try:
        func()
    except Exception:  # a push that fails costs only freshness until the page's next snapshot
        log.warning("could not push the live update %s", key, exc_info=True)


_batches = threading.local()  # .current: weakref to this thread's open _Batch


def _once_on_commit(key: str, func: Callable[[], None]) -> None:
    """Run ``func`` once the current transaction commits, once per ``key`` however often asked.

    The dedupe is this module's own: one :class:`_Batch` per transaction, registered once with
    ``transaction.on_commit``. The thread keeps only a weak reference to it, so a rollback,
    which drops the transaction's callbacks (and with them the last reference to the batch),
    leaves nothing stale behind: the next transaction starts a batch of its own. A send asked
    for inside a savepoint that is rolled back later still goes (a spare "look again" to pages
    that read the database after the commit). Outside a transaction (autocommit) ``func`` runs
    at once, as on_commit does.
    """
    if not transaction.get_connection().in_atomic_block:
        _run(key, func)
        return
    ref = getattr(_batches, "current", None)
    batch = ref() if ref is not None else None
    if batch is None or batch.done:
        batch = _Batch()
        transaction.on_commit(batch.flush, robust=True)
        _batches.current = weakref.ref(batch)
    batch.sends.setdefault(key, func)


def job_changed(job_id: int, owner_id: int | None = None) -> None:
    """After commit: tell the owner's live pages (the job's page and row) that job ``job_id`` changed.

    Connected to :data:`apps.jobs.signals.job_changed` (:mod:`apps.live.receivers`): every state
    change and timeline event (:func:`apps.jobs.state.event_add`) and staging progress. ``owner_id`` saves a
    lookup when the caller has it.
    """
    def send() -> None:
        row = Job.objects.filter(pk=job_id).values_list("owner_id", "project_id", "project__personal_of_id").first()
        if row is None:
            return
        owner, project, personal_of = row
        jobs_changed(owner_id or owner, [job_id], project_id=project if personal_of is None else None)

    _once_on_commit(f"job-{job_id}", send)


def jobs_changed(owner_id: int, job_ids: Iterable[int] | None, *, project_id: int | None = None) -> None:
    """Tell user ``owner_id``'s live pages that ``job_ids`` changed (None: any queued job of theirs),
    and those of shared project ``project_id``'s members when given.

    Sends at once (call it after the commit, or let the helpers above do it).
    """
    ids = None if job_ids is None else sorted(set(job_ids))
    if ids is not None and len(ids) > MAX_JOB_IDS:
        ids = None
    message = {"page": "user", "id": owner_id, "jobs": ids}
    publish(user_group(owner_id), message)
    if project_id is not None:
        publish(project_group(project_id), message)


def pool_changed() -> None:
    """After commit: tell the pool page (GPUs free or queue length may have changed)."""
    _once_on_commit("pool", lambda: publish(POOL_GROUP, {"page": "pool", "id": 0}))


def log_chunk_added(job_id: int, *, attempt: int, offset: int, data: bytes, log_size: int,
                    stream: str = "combined", at: str | None = None) -> None:
    """After commit: send ``data``, stored at byte ``offset`` of the attempt's log, to the job page
    (``stream``: stdout/stderr/combined; ``at``: the agent's time of the bytes, ISO 8601, or None)."""
    def send() -> None:
        _offer(job_group(job_id), {"type": LOG_MESSAGE_TYPE, "job": job_id, "attempt": attempt, "offset": offset,
                                   "data": bytes(data), "version": log_size, "stream": stream, "at": at},
               coalesce=False)

    transaction.on_commit(send, robust=True)


def queue_changed(changes: Iterable[tuple[int, int]]) -> None:
    """After commit: tell each owner that the queue places/estimates/reasons of their jobs changed.

    ``changes`` is ``(owner_id, job_id)`` pairs; one message per owner.
    """
    by_owner: dict[int, list[int]] = {}
    for owner, job_id in changes:
        by_owner.setdefault(owner, []).append(job_id)
    if by_owner:
        transaction.on_commit(lambda: [jobs_changed(o, ids) for o, ids in by_owner.items()], robust=True)


# --- coalescing and sending --------------------------------------------------
def publish(group: str, message: dict[str, Any]) -> None:
    """Send a ``live.changed`` message to ``group`` now, coalesced with others to the same group."""
    _offer(group, {"type": MESSAGE_TYPE, **message, "version": stamp_ms()}, coalesce=True)


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two messages to one group as one: the newer version, the union of the jobs named."""
    merged = {**old, **new}
    if "jobs" in old or "jobs" in new:
        a, b = old.get("jobs"), new.get("jobs")
        union = None if a is None or b is None else sorted(set(a) | set(b))
        merged["jobs"] = None if union is not None and len(union) > MAX_JOB_IDS else union
    merged["version"] = max(old.get("version", 0), new.get("version", 0))
    return merged


class Coalescer:
    """Per event loop: the first message to a group goes at once; those that follow within
    :data:`COALESCE_S` are merged (:func:`merge`) and sent when that time is up."""

    def __init__(self, layer) -> None:
        self.layer = layer
        self.last: dict[str, float] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    async def send(self, group: str, message: dict[str, Any]) -> None:
        """``group_send`` in the order offered: each send is a task of its own, and two
        ``group_send`` calls in flight can overtake each other (a log chunk landing before
        the one it follows makes the page see a gap and reload its whole log). A lock per
        group (asyncio's are FIFO) keeps one send per group in flight."""
        lock = self.locks.get(group)
        if lock is None:
            if len(self.locks) > 10_000:
                self.locks = {g: lk for g, lk in self.locks.items() if lk.locked()}
            lock = self.locks[group] = asyncio.Lock()
        async with lock:
            await send_numbered(self.layer, group, message)

    async def offer(self, group: str, message: dict[str, Any], coalesce: bool) -> None:
        loop = asyncio.get_running_loop()
        if not coalesce:
            await self.send(group, message)
            return
        if group in self.pending:
            self.pending[group] = merge(self.pending[group], message)
            return
        now = loop.time()
        wait = self.last.get(group, -1e9) + COALESCE_S - now
        if wait <= 0:
            self.last[group] = now
            if len(self.last) > 10_000:  # forget groups quiet for longer than the window
                self.last = {g: t for g, t in self.last.items() if t > now - COALESCE_S}
            await self.send(group, message)
            return
        self.pending[group] = message
        loop.call_later(wait, lambda: asyncio.ensure_future(self._flush(group)))

    async def _flush(self, group: str) -> None:
        message = self.pending.pop(group, None)
        if message is None:
            return
        self.last[group] = asyncio.get_running_loop().time()
        try:
            await self.send(group, message)
        except Exception:
            log.warning("could not push a live update to %s", group, exc_info=True)


async def send_numbered(layer, group: str, message: dict[str, Any]) -> None:
    """``group_send`` with the group's next number (``"group"``, ``"seq"``; :mod:`.live_seq`), taken
    as it goes out (after coalescing), so the numbers a socket gets have no gap unless one was lost.
    Without a number (the counter could not be reached) it still goes: pages then rely on the
    consumer's heartbeat."""
    try:
        seq = await live_seq.counter(layer).incr(group)
    except Exception:
        log.warning("could not number a live update to %s", group, exc_info=True)
    else:
        message = {**message, "group": group, "seq": seq}
    await layer.group_send(group, message)


_coalescers: dict[int, Coalescer] = {}


def _coalescer(layer, loop: asyncio.AbstractEventLoop) -> Coalescer:
    key = id(loop)
    found = _coalescers.get(key)
    if found is None or found.layer is not layer:
        found = _coalescers[key] = Coalescer(layer)
    return found


def _offer(group: str, message: dict[str, Any], *, coalesce: bool) -> None:
    """Hand ``message`` to the loop that sends for this process; never waits for it.

    channels-redis: this process's sender loop (its own thread). The in-memory layer
    (standalone): the server's loop, registered by :func:`set_local_loop`; without one
    (a shell, a script) it is sent at once, uncoalesced, through ``async_to_sync``.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    if type(layer).__module__.startswith("channels_redis"):
        loop = _sender_loop()
    else:
        loop = _local_loop
        if loop is None or loop.is_closed():
            try:
                async_to_sync(send_numbered)(layer, group, message)
            except Exception:
                log.warning("could not push a live update to %s", group, exc_info=True)
            return
    coalescer = _coalescer(layer, loop)

    def done(future) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("could not push a live update to %s", group, exc_info=future.exception())

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(coalescer.offer(group, message, coalesce)).add_done_callback(done)
    else:
        asyncio.run_coroutine_threadsafe(coalescer.offer(group, message, coalesce), loop).add_done_callback(done)


_local_loop: asyncio.AbstractEventLoop | None = None


def set_local_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """Standalone: the server's event loop, which owns the in-memory channel layer's queues."""
    global _local_loop
    _local_loop = loop


_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_loop_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for sending to Redis, in a daemon thread of its own.

    ``async_to_sync`` from plain sync code (a Celery task, an agent report)
    starts a new event loop per call, and channels-redis opens a new Redis
    connection per loop: ~8 ms a push. One long-lived loop keeps its
    connection, and runs the coalescing timers. Made per process id, so a
    forked worker gets its own.
    """
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="e31-live-sender", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]
