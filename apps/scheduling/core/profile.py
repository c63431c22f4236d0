"""Availability profile of one group of identical GPUs on one node: free count over time.

A profile is a step function: ``free[i]`` GPUs are free on ``[times[i],
times[i+1])``, the last step lasting forever. It starts at the cycle's
``now`` with the GPUs free now, rises as held GPUs come free, and drops where
the plan holds GPUs for a job (a placement or a reservation). This is the
per-node version of the profile of Mu'alem and Feitelson, "Utilization,
predictability, workloads, and user runtime estimates in scheduling the IBM
SP2 with backfilling", IEEE TPDS 12(6), 2001.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

INF = float("inf")


class Profile:
    """Free GPUs of one unit over time (seconds since the epoch)."""

    __slots__ = ("times", "free")

    def __init__(self, now: float, free_now: int, ends: Iterable[float]):
        """``ends``: sorted times (> now) at which held GPUs come free, one per GPU."""
        times, free = [now], [free_now]
        for end in ends:
            if end <= times[-1]:
                free[-1] += 1
            else:
                times.append(end)
                free.append(free[-1] + 1)
        self.times, self.free = times, free

    def _split(self, t: float) -> int:
        """Index of the step starting at ``t`` (>= now), inserting a breakpoint if needed."""
        i = bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.free.insert(i + 1, self.free[i])
        return i + 1

    def hold(self, start: float, end: float, count: int) -> None:
        """Take ``count`` GPUs from ``start`` to ``end`` (``end`` may be INF)."""
        i = self._split(start)
        j = self._split(end) if end < INF else len(self.times)
        free = self.free
        for k in range(i, j):
            free[k] -= count

    def min_free(self, start: float, end: float) -> int:
        """Fewest GPUs free at any time in ``[start, end)``."""
        times = self.times
        i = bisect_right(times, start) - 1
        low = self.free[i]
        i += 1
        while i < len(times) and times[i] < end:
            if self.free[i] < low:
                low = self.free[i]
            i += 1
        return low

    def windows(self, count: int, duration: float) -> list[tuple[float, float]]:
        """Closed intervals ``[a, b]`` of start times at which ``count`` GPUs stay free for
        ``duration`` seconds; the last one ends at INF."""
        out = []
        good = None
        times, free = self.times, self.free
        for i in range(len(times)):
            if free[i] >= count:
                if good is None:
                    good = times[i]
            elif good is not None:
                last = times[i] - duration
                if last >= good:
                    out.append((good, last))
                good = None
        if good is not None:
            out.append((good, INF))
        return out

    def first_start(self, count: int, duration: float) -> float:
        """Earliest start at which ``count`` GPUs stay free for ``duration`` (INF if never)."""
        good = None
        times, free = self.times, self.free
        for i in range(len(times)):
            if free[i] >= count:
                if good is None:
                    good = times[i]
            elif good is not None:
                if times[i] - duration >= good:
                    return good
                good = None
        return good if good is not None else INF
