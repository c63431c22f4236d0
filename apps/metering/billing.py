"""The meter's formulas (SPEC §4). Pure functions, no database."""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

COST_PLACES = Decimal("0.000001")


def billable_end(rented_at: datetime, run_ended_at: datetime, time_limit_s: int) -> datetime:
    """The end of the billed span: the run's end, never past ``rented_at + time_limit``,
    never before ``rented_at`` (so a duration is never negative)."""
    limit = rented_at + timedelta(seconds=time_limit_s)
    return max(rented_at, min(run_ended_at, limit))


def billed_seconds(rented_at: datetime, run_ended_at: datetime, time_limit_s: int) -> int:
    """``ceil(min(run_ended_at, rented_at + time_limit) - rented_at)`` in whole seconds.

    Per started second, no minimum, rounded once on the total (SPEC §4).
    """
    span = (billable_end(rented_at, run_ended_at, time_limit_s) - rented_at).total_seconds()
    return math.ceil(round(span, 6))


def cost(seconds: int, gpu_count: int, rate_per_gpu_hour: Decimal) -> Decimal:
    """``seconds * gpu_count * rate / 3600`` in the rate's currency, kept to 6 places.

    Args:
        seconds: billed seconds.
        gpu_count: GPUs held by the lease.
        rate_per_gpu_hour: price of one GPU-hour.
    """
    raw = Decimal(seconds) * Decimal(gpu_count) * Decimal(rate_per_gpu_hour) / Decimal(3600)
    return raw.quantize(COST_PLACES, rounding=ROUND_HALF_UP)


def worst_case_cost(time_limit_s: int, gpus: int, rate_per_gpu_hour: Decimal) -> Decimal:
    """Most a job can cost: its whole time limit on all its GPUs."""
    return cost(time_limit_s, gpus, rate_per_gpu_hour)
