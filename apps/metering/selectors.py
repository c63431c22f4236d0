"""Reads of the meter: a user's leases and totals."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from .models import Lease


def usage_leases(*, user, start: datetime | None = None, end: datetime | None = None) -> QuerySet[Lease]:
    """The user's leases rented in ``[start, end)``, newest first, with job and node."""
    qs = Lease.objects.filter(job__owner=user).select_related("job", "node")
    if start:
        qs = qs.filter(rented_at__gte=start)
    if end:
        qs = qs.filter(rented_at__lt=end)
    return qs.order_by("-rented_at", "-id")


@dataclass(frozen=True)
class UsageTotals:
    leases: int
    gpu_hours_billed: Decimal
    billed_seconds: int
    cost: Decimal


def usage_totals(leases) -> UsageTotals:
    """Totals over charged leases: count, billed GPU-hours, billed seconds, cost (6 places)."""
    billed = gpu_s = 0
    cost = Decimal(0)
    count = 0
    for lease in leases:
        count += 1
        if lease.charged and lease.billed_seconds is not None:
            billed += lease.billed_seconds
            gpu_s += lease.billed_seconds * lease.gpu_count
            cost += lease.cost or Decimal(0)
    return UsageTotals(count, (Decimal(gpu_s) / Decimal(3600)).quantize(Decimal("0.0001")), billed, cost)


def lease_held_seconds(lease: Lease, now: datetime | None = None) -> float:
    """Seconds the lease held its GPUs: rent to release (or to now if still open)."""
    end = lease.released_at or now or timezone.now()
    return max(0.0, (end - lease.rented_at).total_seconds())


CSV_COLUMNS = ["lease_id", "job_id", "job_name", "attempt", "node", "gpu_model", "gpu_count",
               "rented_at", "run_ended_at", "released_at", "held_seconds", "billed_seconds",
               "rate_per_gpu_hour", "cost", "charged", "end_reason", "outcome"]


def usage_rows(leases, tz) -> list[list[str]]:
    """CSV rows (``CSV_COLUMNS`` order), times ISO 8601 with the offset of ``tz``."""
    def iso(value: datetime | None) -> str:
        return value.astimezone(tz).isoformat() if value else ""

    rows = []
    for lease in leases:
        rows.append([
            str(lease.pk), str(lease.job_id), lease.job.name, str(lease.attempt), lease.node.name,
            lease.gpu_model, str(lease.gpu_count), iso(lease.rented_at), iso(lease.run_ended_at),
            iso(lease.released_at), f"{lease_held_seconds(lease):.0f}",
            "" if lease.billed_seconds is None else str(lease.billed_seconds),
            str(lease.rate_per_gpu_hour), "" if lease.cost is None else str(lease.cost),
            "yes" if lease.charged else "no", lease.end_reason, lease.job.outcome or lease.job.state,
        ])
    return rows
