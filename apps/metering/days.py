"""Splitting spans of time into a user's local days (pure functions, no database).

A span crossing midnight, a month end or a daylight-saving change counts in
each local day by its true overlap: the day of a DST change is 23 or 25 hours
long, and a span's pieces always add up to its length. Every computation is
done on UTC instants (Python subtracts two datetimes sharing one ``tzinfo``
as wall clock times, which is wrong across a DST change).
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from django.core.exceptions import ValidationError

FIRST_DAY, LAST_DAY = date(1900, 1, 1), date(9998, 12, 31)  # any zone's midnights fit in datetime


def validate_day(day: date) -> None:
    """Form validator for a day asked for in a filter.

    Raises:
        django.core.exceptions.ValidationError: the day is before 1900 or after 9998, where
            a local midnight in some zone falls outside what a datetime can hold.
    """
    if not FIRST_DAY <= day <= LAST_DAY:
        raise ValidationError(f"Must be between {FIRST_DAY:%Y-%m-%d} and {LAST_DAY:%Y-%m-%d}.")


def local_midnight(day: date, tz: tzinfo) -> datetime:
    """The instant (UTC) the local ``day`` starts in ``tz``."""
    return datetime.combine(day, time.min, tzinfo=tz).astimezone(UTC)


def split_by_day(start: datetime, end: datetime, tz: tzinfo) -> Iterator[tuple[date, float]]:
    """``(local day, seconds of [start, end) in it)`` for each local day the span touches.

    Args:
        start, end: aware datetimes; an empty or reversed span yields nothing.
        tz: the zone whose days count.

    Yields days in order; the seconds add up to ``end - start``.
    """
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        return
    day = start.astimezone(tz).date()
    while True:
        lo = max(start, local_midnight(day, tz))
        hi = min(end, local_midnight(day + timedelta(days=1), tz))
        if hi > lo:
            yield day, (hi - lo).total_seconds()
        if hi >= end:
            return
        day += timedelta(days=1)


def month_start(at: datetime, tz: tzinfo) -> datetime:
    """The instant (UTC) the calendar month containing ``at`` starts in ``tz``."""
    local = at.astimezone(tz).date()
    return local_midnight(local.replace(day=1), tz)


def next_month_start(at: datetime, tz: tzinfo) -> datetime:
    """The instant (UTC) the calendar month after the one containing ``at`` starts in ``tz``."""
    local = at.astimezone(tz).date().replace(day=1)
    following = (local + timedelta(days=32)).replace(day=1)
    return local_midnight(following, tz)
