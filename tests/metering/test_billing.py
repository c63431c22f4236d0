"""The meter's formulas (SPEC §4)."""
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from apps.metering.billing import billed_seconds, cost

T0 = datetime(2025, 1, 1, 10, 20, tzinfo=UTC)


def test_it_bills_from_rent_to_run_end():
    assert billed_seconds(T0, T0 + timedelta(minutes=9, seconds=30), 3600) == 570


def test_it_bills_per_started_second_once_on_the_total():
    assert billed_seconds(T0, T0 + timedelta(seconds=61.4), 3600) == 62
    assert billed_seconds(T0, T0 + timedelta(seconds=61), 3600) == 61


def test_it_never_bills_past_the_time_limit_nor_below_zero():
    assert billed_seconds(T0, T0 + timedelta(hours=3), 3600) == 3600
    assert billed_seconds(T0, T0 - timedelta(seconds=5), 3600) == 0


def test_it_prices_gpu_seconds_at_the_rate_to_six_places():
    assert cost(570, 2, Decimal("2.49")) == Decimal("0.788500")
    assert cost(1, 1, Decimal("1")) == Decimal("0.000278")
