"""The meter's consistency check (SPEC §4 invariants), run by ``manage.py meter_check``.

Each check reads the ledger and names every lease, GPU or node that breaks
an invariant; an empty list means the ledger is consistent.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from apps.core import clock
from apps.pool.models import Gpu

from . import billing
from .models import Lease, LeaseGpu


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its kind (a short slug) and what, in words."""

    kind: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


def _end(lease: Lease, now: datetime) -> datetime:
    return lease.released_at or now


def _hold_end(lease: Lease, now: datetime) -> datetime:
    """When the lease let its GPUs go: its release, or for a fenced lease the fence's lift (or now)."""
    if lease.fenced_at is not None:
        return lease.fence_lifted_at or now
    return _end(lease, now)


def check_gpu_overlap(leases: dict[int, Lease], now: datetime) -> list[Violation]:
    """No GPU is in two leases whose holds (rent to release, or to the lift of its fence, or now)
    overlap: a fenced GPU goes to no other job before its node confirmed the stop."""
    by_gpu: dict[int, list[Lease]] = defaultdict(list)
    for gpu_id, lease_id in LeaseGpu.objects.values_list("gpu_id", "lease_id"):
        by_gpu[gpu_id].append(leases[lease_id])
    out = []
    for gpu_id, held in sorted(by_gpu.items()):
        held.sort(key=lambda lease: (lease.rented_at, lease.pk))
        latest = None
        for lease in held:
            if latest is not None and lease.rented_at < _hold_end(latest, now):
                out.append(Violation("gpu-overlap", f"GPU {gpu_id} is in lease {latest.pk} and lease {lease.pk} "
                                                    f"at once (from {lease.rented_at.isoformat()})"))
            if latest is None or _hold_end(lease, now) > _hold_end(latest, now):
                latest = lease
    return out


def check_closed(leases: dict[int, Lease], now: datetime) -> list[Violation]:
    """Closed leases are whole and run forward: run end and release set, not before rent,
    figures set; no open lease belongs to a released job; an open lease is not in the future."""
    out = []
    for lease in leases.values():
        name = f"lease {lease.pk} (job {lease.job_id})"
        if lease.run_ended_at is not None and lease.run_ended_at < lease.rented_at:
            out.append(Violation("negative", f"{name} ends its run before it was rented"))
        if lease.released_at is not None:
            if lease.released_at < lease.rented_at:
                out.append(Violation("negative", f"{name} is released before it was rented"))
            if lease.run_ended_at is None:
                out.append(Violation("open-ended", f"{name} is released but its run has no end"))
            elif lease.released_at < lease.run_ended_at:
                out.append(Violation("negative", f"{name} is released before its run ended"))
            if lease.billed_seconds is None or lease.cost is None:
                out.append(Violation("open-ended", f"{name} is released without billed seconds or cost"))
        elif lease.job.state == "released":
            out.append(Violation("open-ended", f"{name} still holds GPUs but its job is released"))
        if lease.rented_at > now:
            out.append(Violation("clock", f"{name} is rented in the future ({lease.rented_at.isoformat()})"))
    open_in_closed = (LeaseGpu.objects.filter(open=True, lease__released_at__isnull=False)
                      .exclude(lease__fenced_at__isnull=False, lease__fence_lifted_at__isnull=True)
                      .values_list("lease_id", flat=True).distinct())
    out += [Violation("open-ended", f"lease {pk} is released but still marks a GPU as held")
            for pk in sorted(open_in_closed)]
    for lease in leases.values():
        if lease.fenced_at is not None and lease.released_at is None:
            out.append(Violation("fence", f"lease {lease.pk} (job {lease.job_id}) is fenced but not released"))
        if lease.fence_lifted_at is not None and (lease.fenced_at is None or lease.fence_lifted_at < lease.fenced_at):
            out.append(Violation("fence", f"lease {lease.pk} (job {lease.job_id}) lifts a fence it never had"))
    return out


def check_gpus_held(leases: dict[int, Lease]) -> list[Violation]:
    """Billed GPUs are the GPUs held: each lease's ``gpu_count`` equals its lease-GPU rows."""
    held = dict(LeaseGpu.objects.values_list("lease_id").annotate(n=Count("id")))
    return [Violation("gpu-count", f"lease {lease.pk} bills {lease.gpu_count} GPUs but holds {held.get(lease.pk, 0)}")
            for lease in leases.values() if held.get(lease.pk, 0) != lease.gpu_count]


def check_node_capacity(leases: dict[int, Lease], now: datetime) -> list[Violation]:
    """Per node, leased GPU-seconds never exceed its GPUs x the wall time the leases span."""
    gpus = dict(Gpu.objects.values_list("node_id").annotate(n=Count("id")))
    spans: dict[int, list[Lease]] = defaultdict(list)
    for lease in leases.values():
        spans[lease.node_id].append(lease)
    out = []
    for node_id, held in sorted(spans.items()):
        first = min(lease.rented_at for lease in held)
        last = max(_end(lease, now) for lease in held)
        wall = (last - first).total_seconds()
        used = sum(lease.gpu_count * max(0.0, (_end(lease, now) - lease.rented_at).total_seconds()) for lease in held)
        capacity = gpus.get(node_id, 0) * wall
        if used > capacity + 1e-6:
            out.append(Violation("capacity", f"node {node_id}: {used:.0f} GPU-seconds leased in {wall:.0f} s "
                                             f"of wall time, more than its {gpus.get(node_id, 0)} GPUs allow "
                                             f"({capacity:.0f})"))
    return out


def check_money(leases: dict[int, Lease]) -> list[Violation]:
    """Billed seconds within the time limit and as the formula gives; cost as the formula gives."""
    out = []
    for lease in leases.values():
        if lease.billed_seconds is None:
            continue
        name = f"lease {lease.pk} (job {lease.job_id})"
        if lease.billed_seconds > lease.time_limit_s:
            out.append(Violation("time-limit", f"{name} bills {lease.billed_seconds} s, more than its time limit "
                                               f"of {lease.time_limit_s} s"))
        if lease.run_ended_at is not None:
            expected = billing.billed_seconds(lease.rented_at, lease.run_ended_at, lease.time_limit_s)
            if lease.billed_seconds != expected:
                out.append(Violation("formula", f"{name} bills {lease.billed_seconds} s; rent to run end gives "
                                                f"{expected} s"))
        if lease.cost is not None:
            expected_cost = billing.cost(lease.billed_seconds, lease.gpu_count, lease.rate_per_gpu_hour)
            if lease.cost != expected_cost:
                out.append(Violation("formula", f"{name} costs {lease.cost}; {lease.billed_seconds} s x "
                                                f"{lease.gpu_count} GPUs x {lease.rate_per_gpu_hour}/h gives "
                                                f"{expected_cost}"))
    return out


def meter_violations(now: datetime | None = None) -> list[Violation]:
    """Every violation of the meter's invariants in the whole ledger (empty when consistent)."""
    now = now or clock.now()
    fields = [f.name for f in Lease._meta.concrete_fields]
    leases = {lease.pk: lease for lease in Lease.objects.select_related("job").only(*fields, "job__state")}
    return [*check_gpu_overlap(leases, now), *check_closed(leases, now), *check_gpus_held(leases),
            *check_node_capacity(leases, now), *check_money(leases)]
