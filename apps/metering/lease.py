"""The one door of the lease (SPEC §4): every write of a :class:`~apps.metering.models.Lease` field
and of its GPUs' ``open`` flag is made here, and its state moves only through :func:`lease_move`,
which checks the move against :data:`~apps.core.choices.LEASE_MOVES`.

States (:class:`~apps.core.choices.LeaseState`): ``opening`` (rented, meter running) -> ``held``
(the agent took it) -> ``stopping`` (the run ended: meter stopped, ``end_reason`` set) ->
``closed`` (released, GPUs free) or ``fenced`` (released on the meter, GPUs held until the node
confirms the stop) -> ``closed``.

Every time here is the server's clock. Each service is safe to call twice (a broker may deliver a
task twice): a lease already stopped or released is left as it is.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from apps.core import clock
from apps.core.choices import LEASE_MOVES, LeaseState, NodeState
from apps.pool.models import Gpu, Node
from apps.scheduling.tasks import enqueue_schedule_cycle

from . import billing
from .models import Lease, LeaseGpu
from .rates import rate_at


class LeaseMoveError(Exception):
    """The lease move is not in ``LEASE_MOVES``, or another process moved the lease first."""


def lease_move(lease: Lease, to: str, **fields: Any) -> Lease:
    """Move ``lease`` from its state (as last read) to ``to``, writing ``fields`` in the same UPDATE.

    The caller gives the stamps the move sets (``accepted_at``, ``run_ended_at``, ``released_at``,
    ``fenced_at``, ``fence_lifted_at``); the services below compute them.

    Returns:
        ``lease``, updated in place.

    Raises:
        LeaseMoveError: ``lease.state -> to`` is not allowed, or the row was no longer in that
            state (a conditional UPDATE: closes the race of two processes moving one lease).
    """
    src = lease.state
    if to not in LEASE_MOVES[src]:
        raise LeaseMoveError(f"lease {lease.pk}: {src} -> {to} is not allowed")
    if Lease.objects.filter(pk=lease.pk, state=src).update(state=to, **fields) != 1:
        raise LeaseMoveError(f"lease {lease.pk} is no longer {src}")
    lease.state = to
    for key, value in fields.items():
        setattr(lease, key, value)
    return lease


def _write(lease: Lease, **fields: Any) -> None:
    """Write fields that are no move (``seen_at``, ``staging_seconds``, ``charged``, ``accepted_at``
    of a run already stopped)."""
    Lease.objects.filter(pk=lease.pk).update(**fields)
    for key, value in fields.items():
        setattr(lease, key, value)


@transaction.atomic
def lease_open(*, job: Any, node: Node, gpus: list[Gpu], node_rank: int, now: datetime,
               predicted_runtime_s: float | None = None) -> Lease:
    """Hold ``gpus`` of ``node`` for the job's current attempt; the meter starts at ``now``
    (state ``opening``).

    Raises:
        django.db.IntegrityError: a GPU is already in an open lease (the
            partial unique constraint ``one_open_lease_per_gpu``).
    """
    model = gpus[0].model
    lease = Lease.objects.create(
        job=job, attempt=job.attempt, node=node, node_rank=node_rank, state=LeaseState.OPENING,
        gpu_count=len(gpus), gpu_model=model, rate_per_gpu_hour=rate_at(model, now),
        time_limit_s=job.time_limit_s, rented_at=now, predicted_runtime_s=predicted_runtime_s,
    )
    LeaseGpu.objects.bulk_create([LeaseGpu(lease=lease, gpu=gpu) for gpu in gpus])
    return lease


def lease_rent_clock() -> datetime:
    """The meter's start for leases a scheduling cycle is about to open (issue 12 item 1): the
    clock read once the cycle holds the locks that opening leases takes (on PostgreSQL ``ROW
    EXCLUSIVE`` on the lease tables, what their INSERTs take anyway), so no wait for those locks
    is billed. Call inside the cycle's transaction, right before :func:`lease_open`."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in (Lease, LeaseGpu))
            cur.execute(f"LOCK TABLE {tables} IN ROW EXCLUSIVE MODE")
    return clock.now()


def lease_accept(*, lease: Lease, now: datetime) -> None:
    """The agent took the attempt at ``now``: ``opening -> held``, ``accepted_at`` stamped once.

    A lease the server stopped before the agent's word (a gang partner ended) keeps ``stopping``
    but is stamped too: its agent is then told to stop (``gang_stops_for``).
    """
    if lease.accepted_at is not None:
        return
    if Lease.objects.filter(pk=lease.pk, accepted_at__isnull=True).update(accepted_at=now) != 1:
        lease.refresh_from_db(fields=["accepted_at", "state"])
        return
    lease.accepted_at = now
    if lease.state == LeaseState.OPENING:
        lease_move(lease, LeaseState.HELD)


def lease_staging_seconds_set(*, lease: Lease, now: datetime) -> None:
    """``Lease.staging_seconds``: whole seconds (ceil, server clock) from the accept to ``now``, for
    a lease that downloaded inputs on the meter; capped by the time limit. Pre-staged inputs (all in
    the node's cache at rent) leave it 0."""
    start = lease.accepted_at or lease.rented_at
    _write(lease, staging_seconds=min(lease.time_limit_s, max(1, math.ceil((now - start).total_seconds()))))


def leases_seen(*, node: Node, running: list[dict[str, int]], now: datetime) -> int:
    """A heartbeat of ``node`` listed ``running`` (``[{"job_id", "attempt"}]``) at ``now``: stamp
    ``seen_at`` on those of its leases whose run has no end yet (the evidence that bounds the
    end, :func:`apps.metering.billing.evidenced_end`). One UPDATE; returns the rows stamped."""
    refs = {(r["job_id"], r["attempt"]) for r in running}
    if not refs:
        return 0
    listed = Q()
    for job_id, attempt in refs:
        listed |= Q(job_id=job_id, attempt=attempt)
    return Lease.objects.filter(listed, node=node, state__in=(LeaseState.OPENING, LeaseState.HELD)).update(
        seen_at=now)


def _stop(lease: Lease, end: datetime, *, reason: str, charged: bool) -> None:
    """``opening``/``held -> stopping``: the meter stops at ``end`` (capped at the time limit)."""
    seconds = billing.billed_seconds(lease.rented_at, end, lease.time_limit_s)
    lease_move(lease, LeaseState.STOPPING, run_ended_at=billing.billable_end(lease.rented_at, end, lease.time_limit_s),
               billed_seconds=seconds, cost=billing.cost(seconds, lease.gpu_count, lease.rate_per_gpu_hour),
               end_reason=reason, charged=charged)


@transaction.atomic
def leases_stop(*, job: Any, attempt: int, end: datetime, reason: str, charged: bool = True) -> None:
    """Stop the meter of the attempt's leases at ``end`` (capped at the time limit).

    Leases already stopped keep their figures: a duplicate report bills nothing twice.
    """
    for lease in Lease.objects.select_for_update().filter(job=job, attempt=attempt,
                                                          state__in=(LeaseState.OPENING, LeaseState.HELD)):
        _stop(lease, end, reason=reason, charged=charged)


@transaction.atomic
def leases_release(*, job: Any, attempt: int, now: datetime | None = None, fence: bool = False) -> int:
    """Give the attempt's GPUs back to the pool. Returns how many leases it closed.

    ``fence``: the server ends the attempt on its own authority (the node has not said the run
    stopped): each lease on a node that is not down is released on the meter as usual, but its
    GPUs stay held (fenced) until the node confirms the stop (:func:`fences_confirm`) or is
    declared down (:func:`fences_lift`).
    """
    now = now or clock.now()
    closed = 0
    for lease in Lease.objects.select_for_update().filter(job=job, attempt=attempt, released_at__isnull=True):
        if lease.run_ended_at is None:  # released without a run end: stop the meter now
            _stop(lease, now, reason=job.end_reason or "released", charged=True)
        _close_or_fence(lease, max(now, lease.run_ended_at), now, fence=fence)
        closed += 1
    return closed


def _close_or_fence(lease: Lease, released_at: datetime, now: datetime, *, fence: bool) -> None:
    """``stopping -> closed`` (GPUs free) or, with ``fence`` and its node not down, ``-> fenced``."""
    if fence and Node.objects.filter(pk=lease.node_id).exclude(state=NodeState.DOWN).exists():
        lease_move(lease, LeaseState.FENCED, released_at=released_at, fenced_at=now)
        return
    lease_move(lease, LeaseState.CLOSED, released_at=released_at)
    LeaseGpu.objects.filter(lease=lease, open=True).update(open=False)


@transaction.atomic
def leases_end_lost(*, node: Node, at: datetime, job_ids: set[int] | None = None,
                    fence: bool = False, now: datetime | None = None) -> list[Lease]:
    """End every open lease on a lost ``node`` at ``at`` (its last heartbeat), not charged.

    ``job_ids`` limits it to the leases of those jobs. ``fence``: the node itself is not lost
    (a rank whose partner was): its GPUs stay held from ``now`` until it confirms the stop, as
    for :func:`leases_release`. Returns the leases it ended, so the caller can requeue their jobs.
    """
    now = now or clock.now()
    ended = []
    leases = Lease.objects.select_for_update().filter(node=node, released_at__isnull=True)
    if job_ids is not None:
        leases = leases.filter(job_id__in=job_ids)
    for lease in leases:
        if lease.run_ended_at is None:
            _stop(lease, max(at, lease.rented_at), reason="node_lost", charged=False)
        else:
            _write(lease, charged=False)
        _close_or_fence(lease, max(at, lease.run_ended_at), now, fence=fence)
        ended.append(lease)
    return ended


def _lift(leases: QuerySet[Lease], now: datetime) -> list[Lease]:
    """``fenced -> closed``: the fence is lifted at ``now``, the GPUs are free."""
    lifted = list(leases.select_for_update())
    for lease in lifted:
        lease_move(lease, LeaseState.CLOSED, fence_lifted_at=max(now, lease.fenced_at))
        LeaseGpu.objects.filter(lease=lease, open=True).update(open=False)
    if lifted:
        transaction.on_commit(enqueue_schedule_cycle)  # the GPUs are free: place what waits for them
    return lifted


@transaction.atomic
def fences_confirm(*, node: Node, listed: set[tuple[int, int]], min_age_s: float,
                   now: datetime | None = None) -> list[Lease]:
    """Lift the fences on ``node`` whose attempt its agent no longer lists as running.

    ``listed``: the ``(job_id, attempt)`` pairs of the node's heartbeat. Only fences older than
    ``min_age_s`` are lifted, so a heartbeat whose list was taken before the agent took the
    attempt (its answer crossed the fence) confirms nothing. Returns the leases it freed.
    """
    now = now or clock.now()
    fenced = Lease.objects.filter(node=node, state=LeaseState.FENCED,
                                  fenced_at__lte=now - timedelta(seconds=min_age_s))
    return _lift(fenced.exclude(pk__in=[lease.pk for lease in fenced if (lease.job_id, lease.attempt) in listed]),
                 now)


@transaction.atomic
def fences_lift(*, node: Node, now: datetime | None = None) -> list[Lease]:
    """Lift every fence on ``node``: it was declared down (its agent, and every job shim on it,
    stop runs they cannot report for the loss timeout, SPEC §6). Returns the leases it freed."""
    now = now or clock.now()
    return _lift(Lease.objects.filter(node=node, state=LeaseState.FENCED), now)
