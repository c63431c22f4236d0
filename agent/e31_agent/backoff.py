"""Jittered exponential backoff, shared by every retry loop of the agent."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays of 0.5 s doubling up to 30 s, each drawn with "full jitter".

    ``next()`` returns the seconds to wait before the next try; ``reset()``
    after a success. Full jitter (a uniform draw in ``[d/2, d]``) spreads the
    agents of a pool out after a server restart instead of having them all
    come back at once.
    """

    initial_s: float = 0.5
    factor: float = 2.0
    max_s: float = 30.0
    _current: float = field(default=0.0, init=False, repr=False)

    def next(self) -> float:
        """The delay (seconds) before the next try; grows on every call."""
        if self._current <= 0:
            self._current = self.initial_s
        else:
            self._current = min(self._current * self.factor, self.max_s)
        return random.uniform(self._current / 2, self._current)

    def reset(self) -> None:
        """Start again from ``initial_s`` (call after a success)."""
        self._current = 0.0
