"""Prices, one place per rule (issues 13, 22): a lease's price at a moment, and a job's worst case.

A lease whose run still goes (no run end, not released) is priced up to ``now`` by the meter's
formulas (:mod:`apps.metering.billing`, SPEC §4: per started second, capped at the time limit);
any other lease has the figures stored when its meter stopped (:func:`lease_price`).

A job's worst case, the most it can cost before it runs (the spend limit at submit, the queued
jobs the limit counts as committed, the quote of a dry run, the submit form's estimate), is
:func:`worst_case_price`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from apps.core.types import ComputeRequest
from apps.scheduling.core.matching import model_matches

from . import billing
from .models import Lease
from .rates import FALLBACK_RATE


@dataclass(frozen=True, slots=True)
class LeasePrice:
    """``billed_seconds`` (whole seconds) and ``cost`` (USD, 6 places) of a lease at a moment.

    Both are None for a stopped lease whose figures were never stored (not expected: the meter
    stores both when it stops). ``running``: the meter still goes, the figures are up to ``now``.
    """

    billed_seconds: int | None
    cost: Decimal | None
    running: bool


def lease_running(lease: Lease) -> bool:
    """True while the lease's meter still goes: no run end reported and not released."""
    return lease.run_ended_at is None and lease.released_at is None


def lease_price(lease: Lease, now: datetime) -> LeasePrice:
    """The lease's billed seconds and cost at ``now`` (no query: the lease's own fields)."""
    if lease_running(lease):
        seconds = billing.billed_seconds(lease.rented_at, now, lease.time_limit_s)
        return LeasePrice(seconds, billing.cost(seconds, lease.gpu_count, lease.rate_per_gpu_hour), True)
    return LeasePrice(lease.billed_seconds, lease.cost, False)


@dataclass(frozen=True)
class WorstCase:
    """The most a job can cost (USD, 6 places): ``amount`` is ``tasks`` times one task's worst case,
    priced at ``rate_per_gpu_hour``; ``by_model`` is one task's worst case on each GPU model it
    accepts that the pool holds a GPU of, as ``(rate table row, USD)`` in the table's order."""

    amount: Decimal
    rate_per_gpu_hour: Decimal
    by_model: tuple[tuple[Mapping[str, Any], Decimal], ...]


def worst_case_price(request: ComputeRequest, table: Sequence[Mapping[str, Any]], *, tasks: int = 1) -> WorstCase:
    """The worst case of ``tasks`` jobs of ``request`` (a job array's is N times one task's, SPEC §4):
    the whole time limit on all its GPUs (:func:`~apps.metering.billing.worst_case_cost`) at the
    highest rate among the GPU models it accepts (all when it names none) that the pool has; with
    none of them in the pool, any accepted model might run it, so the highest of their rates; with
    no rate at all, :data:`~apps.metering.rates.FALLBACK_RATE`.

    ``table``: :func:`apps.metering.selectors.rate_table` rows (``gpu_model``, ``rate_per_gpu_hour``,
    ``total`` GPUs in the pool); the caller reads it once for many requests. No query here.
    """
    accepted = [row for row in table
                if not request.gpu_models or any(model_matches(w, row["gpu_model"]) for w in request.gpu_models)]
    held = [row for row in accepted if row["total"]]  # only models the pool has can run it
    rate = max((row["rate_per_gpu_hour"] for row in held or accepted), default=FALLBACK_RATE)
    one = billing.worst_case_cost(request.time_limit_s, request.gpus_total, rate)
    by_model = tuple((row, billing.worst_case_cost(request.time_limit_s, request.gpus_total, row["rate_per_gpu_hour"]))
                     for row in held)
    return WorstCase(amount=one * tasks, rate_per_gpu_hour=rate, by_model=by_model)
