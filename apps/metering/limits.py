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
of the models it accepts, from the typed :class:`~apps.core.types.ComputeRequest`:
:func:`apps.metering.pricing.worst_case_price`, the one rule) exceeds what is left. The check
only runs at submit (:func:`apps.jobs.spend.spend_limit_enforce`): a running job is never
stopped by it.
"""
from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, F

from apps.core import clock
from apps.core.choices import JobState
from apps.core.types import ComputeRequest

from . import billing
from .accounts import profile_of
from .days import month_start, next_month_start
from .models import Lease
from .pricing import lease_price, worst_case_price
from .selectors import rate_table
from .statements import paid_between, statement_of

HOLDING_STATES = (JobState.RENTED, JobState.RUNNING)
# The jobs table as the meter's own foreign key names it ("jobs.Job"): metering reads the queued jobs'
# typed requirement columns through it and imports no module of the jobs app (issue 13 layers).
Job = Lease._meta.get_field("job").related_model


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
    project: str = ""  # a project's limit (SPEC §9): its name; "": the account's

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
        whose, raise_it = ("your", "raise the limit (your own in Settings; an operator sets theirs)")
        if self.project:
            whose, raise_it = (f"project {self.project}'s", "ask its owner (budget) or an operator (limit) to raise it")
        return (f"Its worst case, ${_cents(self.worst_case)}, exceeds what is left of {whose} monthly spend limit "
                f"(${_cents(self.left)} of ${_cents(self.limit)} this month) by ${self.shortfall}: "
                f"lower the time limit or the GPUs, or {raise_it}.")


def _cents(amount: Decimal | None) -> str:
    return f"{(amount or Decimal(0)).quantize(billing.CENT):,}"


def _queued_committed(scope: dict[str, int], now: datetime, table: list[dict[str, Any]] | None) -> Decimal:
    """The worst case of the account's (or project's: ``scope`` is ``{"owner_id": ...}`` or
    ``{"project_id": ...}``) queued jobs: one aggregate query over the jobs' typed columns (jobs with
    one request, e.g. the tasks of an array, are priced once and counted), the pool and rates read once."""
    groups = list(Job.objects.filter(**scope, state=JobState.QUEUED)
                  .values("gpu_models", "gpus_per_node", "nodes", "time_limit_s").annotate(n=Count("id")).order_by())
    if not groups:
        return Decimal(0)
    table = rate_table(now) if table is None else table
    total = Decimal(0)
    for row in groups:
        request = ComputeRequest(gpus=row["gpus_per_node"], nodes=row["nodes"],
                                 gpu_models=tuple(row["gpu_models"] or ()), time_limit_s=row["time_limit_s"])
        total += worst_case_price(request, table, tasks=row["n"]).amount
    return total


def _held_committed(scope: dict[str, int], now: datetime) -> Decimal:
    """What the account's (project's) runs going on may still cost: each open-run lease of a job's
    current attempt, its whole worst case less its price so far (:func:`apps.metering.pricing.lease_price`)."""
    total = Decimal(0)
    jobs = {f"job__{k}": v for k, v in scope.items()}
    for lease in Lease.objects.filter(**jobs, job__state__in=HOLDING_STATES,
                                      attempt=F("job__attempt"), run_ended_at__isnull=True):
        whole = billing.worst_case_cost(lease.time_limit_s, lease.gpu_count, lease.rate_per_gpu_hour)
        total += max(Decimal(0), whole - (lease_price(lease, now).cost or Decimal(0)))
    return total


def _committed(scope: dict[str, int], now: datetime, table: list[dict[str, Any]] | None = None) -> Decimal:
    return _queued_committed(scope, now, table) + _held_committed(scope, now)


def spend_check(*, owner, worst_case: Decimal, now: datetime | None = None, figures: bool = False,
                table: list[dict[str, Any]] | None = None) -> SpendCheck:
    """Where a new job of ``worst_case`` USD stands against ``owner``'s limit this month.

    The limit is the account's effective one (the smaller of the operator's and the user's own,
    :attr:`apps.core.models.AccountProfile.effective_spend_limit`). Reads only. Without a limit it
    does no further query (``spent`` and ``committed`` are then 0), unless ``figures`` asks for
    them anyway (a quote shows them). ``table``: the rate table at ``now`` if the caller has read
    it (see :func:`~apps.metering.pricing.worst_case_price`).
    """
    now = now or clock.now()
    profile = profile_of(owner)
    tz = profile.tz
    start, end = month_start(now, tz), next_month_start(now, tz)
    limit = profile.effective_spend_limit
    if limit is None and not figures:
        return SpendCheck(worst_case, None, Decimal(0), Decimal(0), start)
    scope = {"owner_id": owner.pk}
    return SpendCheck(worst_case, limit, month_spent(owner, start, end, now), _committed(scope, now, table), start)


def project_limit(project) -> Decimal | None:
    """A project's effective monthly limit: the lower of the operator's ``spend_limit`` and the
    owner's ``budget`` (USD), or None when neither is set."""
    limits = [x for x in (project.spend_limit, project.budget) if x is not None]
    return min(limits) if limits else None


def project_spend_check(*, project, worst_case: Decimal, now: datetime | None = None,
                        table: list[dict[str, Any]] | None = None) -> SpendCheck:
    """Where a new job of ``worst_case`` USD stands against ``project``'s monthly limit
    (:func:`project_limit`; the month in the site's time zone): every member's jobs of the project
    count, spent and committed as for an account (:func:`spend_check`). Reads only."""
    now = now or clock.now()
    tz = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    start, end = month_start(now, tz), next_month_start(now, tz)
    limit = project_limit(project)
    if limit is None:
        return SpendCheck(worst_case, None, Decimal(0), Decimal(0), start, project.name)
    scope = {"project_id": project.pk}
    return SpendCheck(worst_case, limit, month_spent_of(scope, start, end, now), _committed(scope, now, table),
                      start, project.name)


def month_spent(owner, start: datetime, end: datetime, now: datetime) -> Decimal:
    """What ``owner``'s charged leases cost in ``[start, end)`` (USD, 6 places), as of ``now``: released
    leases by their overlap with the span, a run still going with its cost so far. The ``spent`` of
    :func:`spend_check`, and what a budget alert (:mod:`apps.metering.budget`) compares."""
    return month_spent_of({"owner_id": owner.pk}, start, end, now)


def month_spent_of(scope: dict[str, int], start: datetime, end: datetime, now: datetime) -> Decimal:
    """:func:`month_spent` of the jobs of ``scope`` (``{"owner_id": ...}`` or ``{"project_id": ...}``)."""
    jobs = {f"job__{k}": v for k, v in scope.items()}
    leases = (Lease.objects.filter(**jobs, charged=True, rented_at__lt=end)
              .exclude(released_at__lt=start).select_related("job", "node"))
    return paid_between(statement_of(leases, now).lines, start, end)
