"""The frozen clock of the tests (issue 13): time stands still until the test moves it.

``frozen_clock`` (a fixture, registered in ``tests/conftest.py``) stops the process clock at
:data:`T0` with the ``time-machine`` package, which patches the C-level time sources behind
``time.time`` and ``datetime.now``, so ``django.utils.timezone.now``, :func:`apps.core.clock.now`
and the factories all read the frozen time. Monotonic clocks (timeouts of the database and Redis
clients) keep running. States are reached through the services (``tests/drive.py``) while the
test moves the clock between the steps, never by writing a state or a stamp column.

Ask for ``frozen_clock`` first (``def test_x(frozen_clock, owner, pool)``): pytest makes fixtures in
the order asked, and rows a fixture makes before the clock stops (the ``pool``'s heartbeats) carry
the real time, which lies after :data:`T0`.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.core import clock

T0 = datetime(2025, 6, 2, 10, 0, 0, tzinfo=UTC)
"""Where a frozen clock starts: Monday 2 June 2025, 10:00:00 UTC."""


class FrozenClock:
    """A clock that moves only when told. ``now()`` is what every service reads."""

    def __init__(self, traveller: time_machine.Coordinates) -> None:
        self._traveller = traveller

    def now(self) -> datetime:
        """The frozen time, aware UTC (the same as :func:`apps.core.clock.now`)."""
        return clock.now()

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        """Move the clock forward by ``seconds`` (plus any ``timedelta`` keywords: minutes=, hours=);
        returns the new time. Raises ValueError for a step back."""
        step = timedelta(seconds=seconds, **delta)
        if step < timedelta(0):
            raise ValueError(f"advance: the clock never goes back ({step})")
        self._traveller.shift(step)
        return self.now()

    def set(self, when: datetime) -> datetime:
        """Move the clock to ``when`` (aware): where a test's story starts, or a later step of it.
        It may go back only before anything happened (a test placing its story in January)."""
        self._traveller.move_to(when)
        return self.now()


@pytest.fixture
def frozen_clock() -> Iterator[FrozenClock]:
    """The process clock frozen at :data:`T0` for the test; ``.advance(seconds)`` moves it."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield FrozenClock(traveller)
