"""Statements: totals equal the sum of lines exactly; days are the user's local days (DST, month ends)."""
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from apps.metering.billing import billed_seconds, cents_split, cost
from apps.metering.days import split_by_day
from apps.metering.statements import Line, Statement, by_day, paid_between

BERLIN = ZoneInfo("Europe/Berlin")


def _line(start: datetime, end: datetime, gpus: int = 1, rate: str = "2.49", model: str = "H100-80GB") -> Line:
    seconds = billed_seconds(start, end, 10**6)
    lease = SimpleNamespace(rented_at=start, gpu_count=gpus, gpu_model=model, charged=True)
    return Line(lease, seconds, seconds, cost(seconds, gpus, Decimal(rate)), False, "succeeded")


def _statement(*lines: Line) -> Statement:
    statement = Statement(list(lines))
    cents, statement.cost_cents = cents_split([line.cost for line in lines])
    for line, share in zip(lines, cents, strict=True):
        line.cost_cents = share
        statement.cost += line.cost
    return statement


def test_a_statements_total_is_the_sum_of_its_lines_exactly():
    amounts = [Decimal("0.333333"), Decimal("0.333333"), Decimal("0.333334"), Decimal("1.004999"),
               Decimal("0.005000")]
    cents, total = cents_split(amounts)
    assert total == Decimal("2.01")  # the exact sum 2.009999, rounded once
    assert sum(cents) == total
    assert all(abs(c - a) < Decimal("0.01") for c, a in zip(cents, amounts, strict=True))
    # per-line rounding would have printed 0.33 + 0.33 + 0.33 + 1.00 + 0.01 = 2.00 under a 2.01 total
    assert cents_split([])[1] == Decimal("0.00")


def test_a_statement_of_real_lines_adds_up():
    t = datetime(2025, 5, 1, tzinfo=UTC)
    lines = [_line(t, t + timedelta(seconds=61.4)), _line(t, t + timedelta(seconds=7), gpus=3),
             _line(t, t + timedelta(minutes=17, seconds=1), rate="1.29")]
    assert lines[0].billed_seconds == 62
    statement = _statement(*lines)
    assert statement.cost == sum(line.cost for line in lines)
    assert sum(line.cost_cents for line in lines) == statement.cost_cents


def test_a_lease_across_a_month_end_counts_in_each_month_by_its_overlap():
    line = _line(datetime(2025, 1, 31, 23, tzinfo=UTC), datetime(2025, 2, 1, 1, 30, tzinfo=UTC), gpus=2)
    days = by_day(_statement(line), UTC)
    assert [(d.day, d.gpu_hours) for d in days] == [(date(2025, 1, 31), Decimal("2.00")),
                                                     (date(2025, 2, 1), Decimal("3.00"))]
    assert sum(d.cost for d in days) == line.cost.quantize(Decimal("0.01"))
    january = paid_between([line], datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC))
    february = paid_between([line], datetime(2025, 2, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC))
    assert january + february == line.cost and january > 0 and february > january


def test_berlin_days_across_the_spring_dst_change_have_their_true_lengths():
    # 2025-03-29 23:30 CET to 2025-03-30 04:00 CEST: 3.5 real hours (the clock skips 02:00-03:00).
    start = datetime(2025, 3, 29, 23, 30, tzinfo=BERLIN)
    end = datetime(2025, 3, 30, 4, 0, tzinfo=BERLIN)
    pieces = list(split_by_day(start, end, BERLIN))
    assert pieces == [(date(2025, 3, 29), 1800.0), (date(2025, 3, 30), 3.0 * 3600)]
    days = by_day(_statement(_line(start.astimezone(UTC), end.astimezone(UTC))), BERLIN)
    assert [(d.day, d.gpu_hours) for d in days] == [(date(2025, 3, 29), Decimal("0.50")),
                                                     (date(2025, 3, 30), Decimal("3.00"))]
    whole = list(split_by_day(datetime(2025, 3, 30, tzinfo=BERLIN), datetime(2025, 3, 31, tzinfo=BERLIN), BERLIN))
    assert whole == [(date(2025, 3, 30), 23 * 3600.0)]


def test_berlin_days_across_the_autumn_dst_change_have_their_true_lengths():
    # 2025-10-25 23:00 CEST to 2025-10-26 04:00 CET: 6 real hours (the clock repeats 02:00-03:00).
    start = datetime(2025, 10, 25, 23, 0, tzinfo=BERLIN)
    end = datetime(2025, 10, 26, 4, 0, tzinfo=BERLIN)
    days = by_day(_statement(_line(start.astimezone(UTC), end.astimezone(UTC), gpus=2)), BERLIN)
    assert [(d.day, d.gpu_hours) for d in days] == [(date(2025, 10, 25), Decimal("2.00")),
                                                     (date(2025, 10, 26), Decimal("10.00"))]
    whole = list(split_by_day(datetime(2025, 10, 26, tzinfo=BERLIN), datetime(2025, 10, 27, tzinfo=BERLIN), BERLIN))
    assert whole == [(date(2025, 10, 26), 25 * 3600.0)]


def test_the_same_lease_falls_on_other_days_for_a_user_elsewhere():
    line = _line(datetime(2025, 7, 1, 22, tzinfo=UTC), datetime(2025, 7, 1, 23, tzinfo=UTC))
    assert [d.day for d in by_day(_statement(line), UTC)] == [date(2025, 7, 1)]
    assert [d.day for d in by_day(_statement(line), BERLIN)] == [date(2025, 7, 2)]


def test_days_without_use_between_busy_days_are_on_the_chart():
    t = datetime(2025, 7, 1, 12, tzinfo=UTC)
    later = t + timedelta(days=2)
    days = by_day(_statement(_line(t, t + timedelta(hours=1)), _line(later, later + timedelta(hours=2))), UTC)
    assert [(d.day.day, d.gpu_hours, d.percent) for d in days] == [(1, Decimal("1.00"), 50), (2, Decimal("0.00"), 0),
                                                                  (3, Decimal("2.00"), 100)]
