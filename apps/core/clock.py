"""The server's clock: the one "now" of every service (SPEC §4, one clock).

Services take ``now=`` where a caller may know the time better (a report's arrival); otherwise they
ask :func:`now`. It is the only reader of the wall clock in ``apps/``: ``scripts/clock_check.py``
(``make lint``) fails on ``timezone.now()``, ``datetime.now()``, ``datetime.utcnow()`` or
``date.today()`` anywhere else. It reads Django's aware UTC clock (``django.utils.timezone.now``), so
a test that freezes the process clock (``tests/clock.py``, the ``time-machine`` package) freezes it,
with no patching of this module.
"""
from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    """The current time: an aware ``datetime`` in UTC, microsecond resolution, the server's clock."""
    return timezone.now()
