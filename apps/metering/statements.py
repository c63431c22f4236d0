"""A user's statement: leases as lines, totals, and GPU-hours and cost per local day (SPEC §4).

One statement feeds the usage page, its CSV and the usage API, so the rows
and totals of each are the same numbers. A lease still running is priced up
to ``now`` (cost so far) and marked running; the ledger itself is untouched.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal

from . import billing
from .days import split_by_day
from .models import Lease
from .pricing import lease_price

HOUR = Decimal(3600)


@dataclass
class Line:
    """One lease on a statement.

    ``held_seconds``: rent to release (to ``now`` while open), whole seconds rounded up as the
    billed ones are (:func:`held_seconds_to`), so a line never reads held 8 s, billed 9 s.
    ``billed_seconds`` and ``cost`` (USD, 6 places): the ledger's, or so far
    while the run goes on (``running``). ``cost_cents``: this line's share of
    the statement's total to the cent (charged lines; see
    :func:`apps.metering.billing.cents_split`), None for uncharged lines.
    On a statement of a period, the three are the part of the lease that
    falls in the period, and ``billed_offset`` is where, in seconds after
    ``rented_at``, that part of the billed span starts.
    """

    lease: Lease
    held_seconds: int
    billed_seconds: int | None
    cost: Decimal | None
    running: bool
    outcome: str
    cost_cents: Decimal | None = None
    billed_offset: int = 0

    @property
    def billed_span(self) -> tuple[datetime, datetime] | None:
        """``[rented_at, rented_at + billed_seconds)`` (shifted by ``billed_offset``): the stretch
        of time that is paid for on this statement."""
        if self.billed_seconds is None:
            return None
        start = self.lease.rented_at + timedelta(seconds=self.billed_offset)
        return start, start + timedelta(seconds=self.billed_seconds)

    @property
    def counts(self) -> bool:
        """True when the line is paid: charged and priced."""
        return self.lease.charged and self.cost is not None


@dataclass
class Statement:
    """Lines and their totals. ``cost`` is the exact sum of the charged lines' costs (6 places);
    ``cost_cents`` is it rounded once, and the lines' ``cost_cents`` add up to it."""

    lines: list[Line]
    billed_seconds: int = 0
    gpu_seconds_billed: int = 0
    cost: Decimal = Decimal(0)
    cost_cents: Decimal = Decimal("0.00")
    running: int = 0
    running_cost: Decimal = Decimal(0)

    @property
    def leases(self) -> int:
        return len(self.lines)

    @property
    def gpu_hours_billed(self) -> Decimal:
        """Billed GPU-hours of the charged lines, 4 places."""
        return (Decimal(self.gpu_seconds_billed) / HOUR).quantize(Decimal("0.0001"))


def lease_outcome(lease: Lease) -> str:
    """The outcome to show for a lease: ``running`` while it holds GPUs, its job's outcome,
    or how it ended if the job went on to another attempt."""
    if lease.released_at is None:
        return "running"
    if lease.attempt != lease.job.attempt:
        return lease.end_reason or "retried"
    return lease.job.outcome or lease.job.state


Period = tuple[datetime | None, datetime | None]


def held_seconds_to(moment: datetime, lease: Lease) -> int:
    """Whole seconds from ``lease``'s rent to ``moment``, rounded up like billed seconds
    (:func:`apps.metering.billing.billed_seconds`); 0 before the rent. The parts of adjacent
    periods (``held_seconds_to(end) - held_seconds_to(start)``) add up to the whole exactly."""
    return max(0, math.ceil(round((moment - lease.rented_at).total_seconds(), 6)))


def _seconds_before(moment: datetime | None, lease: Lease, billed: int, *, default: int) -> int:
    """Billed seconds of ``lease`` before ``moment``: ``ceil(moment - rented_at)`` within ``[0, billed]``.

    Rounding up at both ends of a period makes the parts of adjacent periods
    add up to the lease's ``billed_seconds`` exactly (no second lost or counted twice).
    """
    if moment is None:
        return default
    return min(billed, max(0, math.ceil(round((moment - lease.rented_at).total_seconds(), 6))))


def _in_period(line: Line, period: Period, now: datetime) -> Line:
    """``line`` cut to the part of its lease in ``[start, end)`` (SPEC §4: usage by overlap)."""
    lease, (start, end) = line.lease, period
    held_from = max(lease.rented_at, start) if start else lease.rented_at
    held_to = min(lease.released_at or now, end) if end else (lease.released_at or now)
    line.held_seconds = held_seconds_to(held_to, lease) - held_seconds_to(held_from, lease)
    if line.billed_seconds is None:
        return line
    billed = line.billed_seconds
    first = _seconds_before(start, lease, billed, default=0)
    part = _seconds_before(end, lease, billed, default=billed) - first
    if part != billed:
        line.billed_offset, line.billed_seconds = first, part
        if line.cost is not None:
            line.cost = billing.cost(part, lease.gpu_count, lease.rate_per_gpu_hour)
    return line


def statement_of(leases, now: datetime, period: Period | None = None) -> Statement:
    """The statement of ``leases`` (with ``job`` and ``node`` loaded), priced at ``now``.

    With ``period`` (``[start, end)``, either end open with None), each line
    counts only the held and billed seconds of its lease inside the period,
    so a lease from Jan 31 23:00 to Feb 1 01:30 puts 1 h in January and
    1.5 h in February; costs of the parts are priced at the lease's rate.
    """
    lines = []
    for lease in leases:
        end = lease.released_at or now
        held = held_seconds_to(end, lease)
        price = lease_price(lease, now)
        line = Line(lease, held, price.billed_seconds, price.cost, price.running, lease_outcome(lease))
        lines.append(_in_period(line, period, now) if period else line)
    statement = Statement(lines)
    paid = [line for line in lines if line.counts]
    cents, statement.cost_cents = billing.cents_split([line.cost for line in paid])
    for line, share in zip(paid, cents, strict=True):
        line.cost_cents = share
        statement.billed_seconds += line.billed_seconds
        statement.gpu_seconds_billed += line.billed_seconds * line.lease.gpu_count
        statement.cost += line.cost
        if line.running:
            statement.running += 1
            statement.running_cost += line.cost
    return statement


# --- per local day ------------------------------------------------------------
@dataclass
class Day:
    """One local day of a statement: billed GPU-hours and cost, in all and per GPU model.

    ``percent`` is the day's GPU-hours as a share of the busiest day's, for a bar.
    """

    day: date
    gpu_hours: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    by_model: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)
    percent: int = 0


def line_pieces(line: Line, tz: tzinfo) -> list[tuple[date, float, Decimal]]:
    """``(local day, billed GPU-seconds, cost)`` of a paid line for each day its billed span touches.

    The span counts in each day by its overlap (so a lease across midnight,
    a month end or a DST change is split by its true length in each). Cost
    is shared in proportion to the overlap, 6 places.
    """
    span = line.billed_span
    if not line.counts or span is None or line.billed_seconds == 0:
        return []
    pieces = list(split_by_day(*span, tz))
    out = []
    for day, seconds in pieces:
        share = (line.cost * Decimal(str(seconds)) / Decimal(line.billed_seconds)).quantize(billing.COST_PLACES,
                                                                                           ROUND_HALF_UP)
        out.append((day, seconds * line.lease.gpu_count, share))
    return out


def by_day(statement: Statement, tz: tzinfo, *, first: date | None = None, last: date | None = None) -> list[Day]:
    """Billed GPU-hours (2 places) and cost (to the cent) per local day in ``tz``, oldest first.

    Days without use between the first and the last day with any are
    included (a chart's axis has no gaps); ``first``/``last`` clip the range.
    """
    gpu_s: dict[date, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    money: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for line in statement.lines:
        for day, seconds, share in line_pieces(line, tz):
            if (first and day < first) or (last and day > last):
                continue
            gpu_s[day][line.lease.gpu_model] += seconds
            money[day][line.lease.gpu_model] += share
    if not gpu_s:
        return []
    days = []
    day, end = min(gpu_s), max(gpu_s)
    while day <= end:
        row = Day(day)
        for model in sorted(gpu_s.get(day, {})):
            hours = (Decimal(str(gpu_s[day][model])) / HOUR).quantize(Decimal("0.01"), ROUND_HALF_UP)
            cost = money[day][model].quantize(billing.CENT, ROUND_HALF_UP)
            row.by_model[model] = (hours, cost)
        row.gpu_hours = (Decimal(str(sum(gpu_s.get(day, {}).values()))) / HOUR).quantize(Decimal("0.01"),
                                                                                        ROUND_HALF_UP)
        row.cost = sum(money.get(day, {}).values(), Decimal(0)).quantize(billing.CENT, ROUND_HALF_UP)
        days.append(row)
        day += timedelta(days=1)
    top = max(d.gpu_hours for d in days)
    for row in days:
        row.percent = round(100 * row.gpu_hours / top) if top else 0
    return days


def chart_data(days: list[Day]) -> dict:
    """The chart's data as JSON-ready lists: ``{"days": [...], "models": [...],
    "gpu_hours": {model: [...]}, "cost": {model: [...]}}`` (floats, one per day)."""
    models = sorted({m for d in days for m in d.by_model})
    return {
        "days": [d.day.isoformat() for d in days],
        "models": models,
        "gpu_hours": {m: [float(d.by_model.get(m, (0, 0))[0]) for d in days] for m in models},
        "cost": {m: [float(d.by_model.get(m, (0, 0))[1]) for d in days] for m in models},
    }


def paid_between(lines: list[Line], start: datetime, end: datetime) -> Decimal:
    """Cost (6 places) of the paid lines' billed spans that falls in ``[start, end)``, shared by overlap."""
    total = Decimal(0)
    for line in lines:
        span = line.billed_span
        if not line.counts or span is None or not line.billed_seconds:
            continue
        lo, hi = max(span[0], start), min(span[1], end)
        if hi <= lo:
            continue
        if lo == span[0] and hi == span[1]:
            total += line.cost
        else:
            seconds = Decimal(str((hi - lo).total_seconds()))
            total += (line.cost * seconds / Decimal(line.billed_seconds)).quantize(billing.COST_PLACES,
                                                                                  ROUND_HALF_UP)
    return total
