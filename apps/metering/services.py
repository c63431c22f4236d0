"""Writes to the meter: open, stop and release leases (SPEC §4).

Every time here is the server's clock. Each function is safe to call twice
(a broker may deliver a task twice): a lease already stopped or released is
left as it is.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.choices import NodeState
from apps.pool.models import Gpu, Node
from apps.scheduling.tasks import enqueue_schedule_cycle

from . import billing
from .models import Lease, LeaseGpu
from .rates import rate_at


@transaction.atomic
def lease_open(*, job, node: Node, gpus: list[Gpu], node_rank: int, now: datetime,
               predicted_runtime_s: float | None = None) -> Lease:
    """Hold ``gpus`` of ``node`` for the job's current attempt; the meter starts at ``now``.

    Raises:
        django.db.IntegrityError: a GPU is already in an open lease (the
            partial unique constraint ``one_open_lease_per_gpu``).
    """
    model = gpus[0].model
    lease = Lease.objects.create(
        job=job, attempt=job.attempt, node=node, node_rank=node_rank, gpu_count=len(gpus),
        gpu_model=model, rate_per_gpu_hour=rate_at(model, now), time_limit_s=job.time_limit_s,
        rented_at=now, predicted_runtime_s=predicted_runtime_s,
    )
    LeaseGpu.objects.bulk_create([LeaseGpu(lease=lease, gpu=gpu) for gpu in gpus])
    return lease


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
    return Lease.objects.filter(listed, node=node, released_at__isnull=True,
                                run_ended_at__isnull=True).update(seen_at=now)


def _stop(lease: Lease, end: datetime, *, reason: str, charged: bool) -> None:
    lease.run_ended_at = billing.billable_end(lease.rented_at, end, lease.time_limit_s)
    lease.billed_seconds = billing.billed_seconds(lease.rented_at, end, lease.time_limit_s)
    lease.cost = billing.cost(lease.billed_seconds, lease.gpu_count, lease.rate_per_gpu_hour)
    lease.end_reason = reason
    lease.charged = charged
    lease.save(update_fields=["run_ended_at", "billed_seconds", "cost", "end_reason", "charged"])


@transaction.atomic
def leases_stop(*, job, attempt: int, end: datetime, reason: str, charged: bool = True) -> None:
    """Stop the meter of the attempt's leases at ``end`` (capped at the time limit).

    Leases already stopped keep their figures: a duplicate report bills nothing twice.
    """
    for lease in Lease.objects.select_for_update().filter(job=job, attempt=attempt, run_ended_at__isnull=True):
        _stop(lease, end, reason=reason, charged=charged)


@transaction.atomic
def leases_release(*, job, attempt: int, now: datetime | None = None, fence: bool = False) -> int:
    """Give the attempt's GPUs back to the pool. Returns how many leases it closed.

    ``fence``: the server ends the attempt on its own authority (the node has not said the run
    stopped): each lease on a node that is not down is released on the meter as usual, but its
    GPUs stay held (fenced) until the node confirms the stop (:func:`fences_confirm`) or is
    declared down (:func:`fences_lift`).
    """
    now = now or timezone.now()
    closed = 0
    for lease in Lease.objects.select_for_update().filter(job=job, attempt=attempt, released_at__isnull=True):
        if lease.run_ended_at is None:  # released without a run end: stop the meter now
            _stop(lease, now, reason=job.end_reason or "released", charged=True)
        lease.released_at = max(now, lease.run_ended_at)
        lease.save(update_fields=["released_at"])
        _close_or_fence(lease, now, fence=fence)
        closed += 1
    return closed


def _close_or_fence(lease: Lease, now: datetime, *, fence: bool) -> None:
    """Free a released lease's GPUs, or, with ``fence`` and its node not down, keep them held."""
    if fence and Node.objects.filter(pk=lease.node_id).exclude(state=NodeState.DOWN).exists():
        lease.fenced_at = now
        lease.save(update_fields=["fenced_at"])
        return
    LeaseGpu.objects.filter(lease=lease, open=True).update(open=False)


@transaction.atomic
def leases_end_lost(*, node: Node, at: datetime, job_ids: set[int] | None = None,
                    fence: bool = False, now: datetime | None = None) -> list[Lease]:
    """End every open lease on a lost ``node`` at ``at`` (its last heartbeat), not charged.

    ``job_ids`` limits it to the leases of those jobs. ``fence``: the node itself is not lost
    (a rank whose partner was): its GPUs stay held from ``now`` until it confirms the stop, as
    for :func:`leases_release`. Returns the leases it ended, so the caller can requeue their jobs.
    """
    now = now or timezone.now()
    ended = []
    leases = Lease.objects.select_for_update().filter(node=node, released_at__isnull=True)
    if job_ids is not None:
        leases = leases.filter(job_id__in=job_ids)
    for lease in leases:
        if lease.run_ended_at is None:
            _stop(lease, max(at, lease.rented_at), reason="node_lost", charged=False)
        else:
            lease.charged = False
            lease.save(update_fields=["charged"])
        lease.released_at = max(at, lease.run_ended_at)
        lease.save(update_fields=["released_at"])
        _close_or_fence(lease, now, fence=fence)
        ended.append(lease)
    return ended


def _lift(leases, now: datetime) -> list[Lease]:
    lifted = list(leases.select_for_update())
    for lease in lifted:
        lease.fence_lifted_at = max(now, lease.fenced_at)
        lease.save(update_fields=["fence_lifted_at"])
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
    now = now or timezone.now()
    fenced = Lease.objects.filter(node=node, fenced_at__isnull=False, fence_lifted_at__isnull=True,
                                  fenced_at__lte=now - timedelta(seconds=min_age_s))
    return _lift(fenced.exclude(pk__in=[lease.pk for lease in fenced if (lease.job_id, lease.attempt) in listed]),
                 now)


@transaction.atomic
def fences_lift(*, node: Node, now: datetime | None = None) -> list[Lease]:
    """Lift every fence on ``node``: it was declared down (its agent, and every job shim on it,
    stop runs they cannot report for the loss timeout, SPEC §6). Returns the leases it freed."""
    now = now or timezone.now()
    return _lift(Lease.objects.filter(node=node, fenced_at__isnull=False, fence_lifted_at__isnull=True), now)
