"""Monthly spend limits (SPEC §4, issue 6): refuse at submit a job whose worst case does not fit.

What is left of an account's limit this calendar month (in the account's
time zone) is ``limit - spent - committed``:

- ``spent``: the cost of the account's charged leases that falls in this
  month (a lease across the month's start counts by its overlap; a run still
  going counts with its cost so far);
- ``committed``: what the account's unfinished jobs may still cost: a queued
  job its whole worst case, a job holding GPUs the rest of its leases' worst
  case beyond what they have cost so far.

A job is refused when its worst case (time limit x GPUs x the highest rate
of the models it accepts) exceeds what is left. The check only runs at
submit: a running job is never stopped by it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any

from django.db.models import Count
from django.utils import timezone

from apps.core.models import AccountProfile

from . import billing
from .accounts import profile_of
from .days import month_start, next_month_start
from .models import Lease
from .rates import FALLBACK_RATE
from .selectors import price_estimate
from .statements import paid_between, statement_of

ACTIVE_STATES = ("queued", "rented", "running")


@dataclass(frozen=True)
class SpendCheck:
    """How a job's worst case stands against the account's monthly limit (USD, 6 places).

    ``limit`` and ``left`` are None when the account has no limit; then
    ``fits`` is true and ``shortfall`` is 0.
    """

    worst_case: Decimal
    limit: Decimal | None
    spent: Decimal
    committed: Decimal
    month_start: datetime

    @property
    def left(self) -> Decimal | None:
        if self.limit is None:
            return None
        return max(Decimal(0), self.limit - self.spent - self.committed)

    @property
    def shortfall(self) -> Decimal:
        """By how much the worst case exceeds what is left, rounded up to the cent (0 when it fits)."""
        if self.left is None or self.worst_case <= self.left:
            return Decimal("0.00")
        return (self.worst_case - self.left).quantize(billing.CENT, rounding=ROUND_CEILING)

    @property
    def fits(self) -> bool:
        return self.shortfall == 0

    def message(self) -> str:
        """The refusal in words, with the shortfall (empty when the job fits)."""
        if self.fits:
            return ""
        return (f"Its worst case, ${_cents(self.worst_case)}, exceeds what is left of your monthly spend limit "
                f"(${_cents(self.left)} of ${_cents(self.limit)} this month) by ${self.shortfall}: "
                "lower the time limit or the GPUs, or ask an operator to raise the limit.")


def _cents(amount: Decimal | None) -> str:
    return f"{(amount or Decimal(0)).quantize(billing.CENT):,}"


def worst_case_of(compute: Any, now: datetime | None = None) -> Decimal:
    """Most a job with this compute part can cost (6 places): time limit x GPUs x the highest
    rate among the GPU models it accepts that the pool has (any accepted model when the pool has
    none of them; the fallback rate if none has a rate).

    ``compute``: a spec's compute part (mapping). Raises ValueError if it is incomplete.
    """
    estimate = price_estimate(compute, now)
    if estimate is None:
        raise ValueError("the compute part needs gpus and a time limit")
    # Only models the pool has can run it; with none of them in the pool, any accepted model might.
    rows = [row for row in estimate.rows if row["total"]] or estimate.rows
    rate = max((row["rate_per_gpu_hour"] for row in rows), default=FALLBACK_RATE)
    from apps.jobs.spec import parse_duration

    return billing.worst_case_cost(parse_duration(compute.get("time_limit")), estimate.gpus, rate)


def _committed(owner, now: datetime) -> Decimal:
    from apps.jobs.models import Job

    total = Decimal(0)
    # Queued jobs: worst case per distinct compute part (the tasks of an array share one), in SQL.
    queued = (Job.objects.filter(owner=owner, state="queued").values("spec__compute")
              .annotate(n=Count("id")).order_by())
    for row in queued:
        try:
            total += worst_case_of(row["spec__compute"] or {}, now) * row["n"]
        except ValueError:
            continue
    for job in Job.objects.filter(owner=owner, state__in=ACTIVE_STATES).exclude(state="queued").only(
            "id", "state", "attempt"):
        for lease in Lease.objects.filter(job=job, attempt=job.attempt, run_ended_at__isnull=True):
            whole = billing.cost(lease.time_limit_s, lease.gpu_count, lease.rate_per_gpu_hour)
            so_far = billing.cost(billing.billed_seconds(lease.rented_at, now, lease.time_limit_s),
                                  lease.gpu_count, lease.rate_per_gpu_hour)
            total += max(Decimal(0), whole - so_far)
    return total


def spend_check(*, owner, worst_case: Decimal, now: datetime | None = None, figures: bool = False) -> SpendCheck:
    """Where a new job of ``worst_case`` USD stands against ``owner``'s limit this month.

    Reads only. Without a limit it does no further query (``spent`` and ``committed`` are then
    0), unless ``figures`` asks for them anyway (a quote shows them).
    """
    now = now or timezone.now()
    profile = profile_of(owner)
    tz = profile.tz
    start, end = month_start(now, tz), next_month_start(now, tz)
    if profile.monthly_spend_limit is None and not figures:
        return SpendCheck(worst_case, None, Decimal(0), Decimal(0), start)
    leases = (Lease.objects.filter(job__owner=owner, charged=True, rented_at__lt=end)
              .exclude(released_at__lt=start).select_related("job", "node"))
    spent = paid_between(statement_of(leases, now).lines, start, end)
    return SpendCheck(worst_case, profile.monthly_spend_limit, spent, _committed(owner, now), start)


def spend_limit_enforce(*, owner, compute: Any, now: datetime | None = None, tasks: int = 1) -> SpendCheck:
    """Refuse a job whose worst case exceeds what is left of ``owner``'s monthly limit.

    Called by :func:`apps.jobs.services.job_submit` before the job is stored, and once by
    :func:`apps.jobs.arrays.array_submit` for a whole array: ``tasks`` times one task's worst case.

    Raises:
        apps.jobs.spec.SpecError: ``{"compute": [message with the shortfall]}``.
    """
    from apps.jobs.spec import SpecError

    # Inside the submit's transaction the profile row is locked, so two submits of one
    # account at once are checked one after the other: the second sees the first as committed.
    if not AccountProfile.objects.select_for_update().filter(owner_id=owner.pk,
                                                             monthly_spend_limit__isnull=False).exists():
        return SpendCheck(Decimal(0), None, Decimal(0), Decimal(0), now or timezone.now())
    check = spend_check(owner=owner, worst_case=worst_case_of(compute, now) * tasks, now=now)
    if not check.fits:
        raise SpecError({"compute": [check.message()]})
    return check
