"""Reads of the meter: a user's leases and totals."""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from apps.jobs.spec import format_duration, parse_duration
from apps.pool.scheduler.matching import model_matches
from apps.pool.selectors import pool_summary

from .billing import billed_seconds, cost, worst_case_cost
from .display import rate_text
from .models import Lease
from .rates import FALLBACK_RATE, current_rates


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


def lease_outcome(lease: Lease) -> str:
    """The outcome to show for a lease: its job's, or how it ended if the job was retried."""
    if lease.attempt != lease.job.attempt:
        return lease.end_reason or "retried"
    return lease.job.outcome or lease.job.state


def usage_records(leases, tz) -> list[dict]:
    """One typed record per lease (keys ``CSV_COLUMNS``): ints, booleans, decimals as
    strings, times ISO 8601 with the offset of ``tz`` (None when not yet)."""
    def iso(value: datetime | None) -> str | None:
        return value.astimezone(tz).isoformat() if value else None

    return [{
        "lease_id": lease.pk, "job_id": lease.job_id, "job_name": lease.job.name, "attempt": lease.attempt,
        "node": lease.node.name, "gpu_model": lease.gpu_model, "gpu_count": lease.gpu_count,
        "rented_at": iso(lease.rented_at), "run_ended_at": iso(lease.run_ended_at),
        "released_at": iso(lease.released_at), "held_seconds": round(lease_held_seconds(lease)),
        "billed_seconds": lease.billed_seconds, "rate_per_gpu_hour": str(lease.rate_per_gpu_hour),
        "cost": None if lease.cost is None else str(lease.cost), "charged": lease.charged,
        "end_reason": lease.end_reason, "outcome": lease_outcome(lease),
    } for lease in leases]


def usage_rows(leases, tz) -> list[list[str]]:
    """CSV rows (``CSV_COLUMNS`` order) of :func:`usage_records`; empty cells for None."""
    def cell(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        return str(value)

    return [[cell(record[key]) for key in CSV_COLUMNS] for record in usage_records(leases, tz)]


@dataclass(frozen=True)
class Money:
    """What a job has cost so far (SPEC §4): charged leases, plus what open runs accrue.

    ``cost`` is kept to 6 places; pages show it to the cent. ``accruing`` is
    true while a run's meter is still going (its lease has no cost yet).
    """

    cost: Decimal
    billed_seconds: int
    accruing: bool


def job_money(leases, now: datetime) -> Money:
    """Cost so far over a job's leases; an open, unpriced run is priced up to ``now``."""
    total, seconds, accruing = Decimal(0), 0, False
    for lease in leases:
        if not lease.charged:
            continue
        if lease.cost is not None:
            total += lease.cost
            seconds += lease.billed_seconds or 0
        elif lease.run_ended_at is None:
            running = billed_seconds(lease.rented_at, now, lease.time_limit_s)
            total += cost(running, lease.gpu_count, lease.rate_per_gpu_hour)
            seconds += running
            accruing = True
    return Money(total, seconds, accruing)


# --- GPU-hours by day (the usage page's chart) ------------------------------
CHART_DAYS_MAX = 60


@dataclass(frozen=True)
class DayBar:
    day: date
    gpu_hours: Decimal
    percent: int


def gpu_hours_by_day(leases, tz) -> list[DayBar]:
    """Billed GPU-hours of charged leases per day of ``rented_at`` in ``tz``, newest last,
    at most the last 60 days that have any; ``percent`` of the largest day, for a bar."""
    hours: dict[date, Decimal] = defaultdict(Decimal)
    for lease in leases:
        if lease.charged and lease.billed_seconds:
            day = lease.rented_at.astimezone(tz).date()
            hours[day] += Decimal(lease.billed_seconds * lease.gpu_count) / 3600
    days = sorted(hours)[-CHART_DAYS_MAX:]
    top = max((hours[d] for d in days), default=Decimal(0))
    return [DayBar(d, hours[d].quantize(Decimal("0.01")), round(100 * hours[d] / top) if top else 0)
            for d in days]


# --- rates and the price estimate (the new-job form) ------------------------
def rate_table(now: datetime | None = None) -> list[dict[str, Any]]:
    """Every GPU model with a rate or in the pool: rate per GPU-hour and GPUs total/free.

    Shape: ``[{"gpu_model", "rate_per_gpu_hour", "rate" (text), "total", "free"}]`` sorted by model.
    """
    now = now or timezone.now()
    rates = current_rates(now)
    pool = {row["gpu_model"]: row for row in pool_summary(now)}
    return [
        {"gpu_model": model, "rate_per_gpu_hour": rates.get(model, FALLBACK_RATE),
         "rate": rate_text(rates.get(model, FALLBACK_RATE)),
         "total": pool.get(model, {}).get("total", 0), "free": pool.get(model, {}).get("free", 0)}
        for model in sorted(set(rates) | set(pool))
    ]


@dataclass(frozen=True)
class Estimate:
    """The most a job can cost on each GPU model it accepts (SPEC §4: time limit x GPUs x rate)."""

    gpus: int
    time_limit: str
    rows: list[dict[str, Any]]


def price_estimate(compute: Any, now: datetime | None = None) -> Estimate | None:
    """Worst-case cost per accepted model for a compute part, or None if it is not complete.

    ``compute`` is a spec's compute part, or the form's inputs as typed (text).
    ``rows`` are :func:`rate_table` rows with ``worst_case`` (a Decimal to the cent)
    added, for the models ``compute.gpu_model`` accepts (all when none is named).
    """
    if not isinstance(compute, Mapping):
        return None
    gpus, nodes = compute.get("gpus"), compute.get("nodes", 1)
    if isinstance(gpus, str):
        gpus = _typed_int(gpus)
    if isinstance(nodes, str):
        nodes = _typed_int(nodes) if nodes.strip() else 1
    if type(gpus) is not int or type(nodes) is not int or gpus < 1 or nodes < 1:
        return None
    try:
        seconds = parse_duration(compute.get("time_limit"))
    except (TypeError, ValueError, AttributeError):
        return None
    wanted = compute.get("gpu_model") or []
    if isinstance(wanted, str):
        wanted = [part.strip() for part in re.split(r"[\n,]", wanted) if part.strip()]
    wanted = [w for w in wanted if isinstance(w, str)] if isinstance(wanted, list) else []
    rows = []
    for row in rate_table(now):
        if wanted and not any(model_matches(w, row["gpu_model"]) for w in wanted):
            continue
        worst = worst_case_cost(seconds, gpus * nodes, row["rate_per_gpu_hour"])
        worst = worst.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        rows.append({**row, "worst_case": worst})
    return Estimate(gpus=gpus * nodes, time_limit=format_duration(seconds), rows=rows)


def _typed_int(text: str) -> Any:
    """``" 4 "`` -> 4; any other text is returned as it is (and is then not a count)."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text
