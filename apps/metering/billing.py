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


def evidenced_end(*, rented_at: datetime, arrived_at: datetime, seen_at: datetime | None = None,
                  heartbeat_s: float = 0.0, measured_s: float | None = None) -> datetime:
    """When a run ended, by the evidence the server saw (SPEC §4, "one clock"): the earliest of

    - ``arrived_at``, when the report saying it ended arrived;
    - ``seen_at + heartbeat_s``, the last heartbeat that listed the run plus one heartbeat
      interval (seconds), when there was one;
    - ``rented_at + measured_s``, the run length the agent measured on its monotonic clock
      from its accept of the assignment (staging included), when it sent one;

    never before ``rented_at``. So the time a report waits on the agent's disk (a web outage,
    a slow network) is not billed.
    """
    end = arrived_at
    if seen_at is not None:
        end = min(end, seen_at + timedelta(seconds=heartbeat_s))
    if measured_s is not None:
        end = min(end, rented_at + timedelta(seconds=measured_s))
    return max(rented_at, end)


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


CENT = Decimal("0.01")


def cents_split(amounts: list[Decimal]) -> tuple[list[Decimal], Decimal]:
    """Show a statement to the cent so its lines add up to its total, exactly.

    The total is rounded once (half up) from the exact sum of ``amounts``
    (each kept to 6 places, none negative); each line gets its amount rounded
    down to the cent, and the cents left over go one each to the lines with
    the largest remainders (Hamilton's largest-remainder method), ties to the
    earlier line. So no line is off by a cent or more, and
    ``sum(lines) == total`` holds for what the page prints.

    Returns:
        (line amounts to the cent, total to the cent).
    """
    total = sum(amounts, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_UP)
    floors = [a.quantize(CENT, rounding="ROUND_FLOOR") for a in amounts]
    left = int((total - sum(floors, Decimal(0))) / CENT)
    order = sorted(range(len(amounts)), key=lambda i: (-(amounts[i] - floors[i]), i))
    for i in order[:max(0, left)]:
        floors[i] += CENT
    return floors, total
