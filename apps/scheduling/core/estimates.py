"""Cheap start estimates for the jobs the cycle neither starts nor reserves.

List scheduling on per-GPU availability times: each unit keeps the sorted
times at which its GPUs are next available (after what runs, what starts
now and what is reserved). A job needing ``k`` GPUs on ``m`` nodes starts
at the ``m``-th smallest "time the ``k``-th GPU of a unit is available"
over the units it may use; its GPUs are then available again at its planned
end. Per ``(group, k)`` a heap of those times (stale entries dropped lazily)
makes each job O(m log units) rather than O(units), so 10,000 queued jobs
cost milliseconds. The walk ignores the gaps a job leaves before it (later
jobs do not backfill into them), so estimates err late, never early.
"""
from __future__ import annotations

import heapq

from .pool import Pool
from .types import JobRequest


class EstimateWalk:
    """Per-unit GPU availability after the cycle's placements and reservations."""

    def __init__(self, pool: Pool, *, limits: bool = False):
        """``limits``: the plan by time limits (the bound, ``squeue --start``): what runs ends at
        its limit, what starts now holds its limit, and no reservation is held (the walk places
        the reserved jobs too, in their turn)."""
        self.pool = pool
        now = pool.now
        self.avail: list[list[float]] = []
        for unit in pool.units:
            ends, holds = unit.ends, unit.holds
            if limits:
                if unit.lends is not None:
                    ends, holds = unit.lends, unit.lholds
                holds = [h for h in holds if h[0] <= now]  # placements only
            avail = [now] * unit.free0 + ends
            if holds:
                for _start, end, count in sorted(holds):
                    avail = sorted(avail[count:] + [end] * count)
            self.avail.append(avail)
        self.version = [0] * len(pool.units)
        self.heaps: dict[tuple[int, int], list[tuple[float, int, int]]] = {}
        self.built: dict[int, list[int]] = {}  # group -> the k values whose heaps exist
        self.last_nodes: tuple[int, ...] = ()  # node ids of the last job placed (rank order); () if none

    def _heap(self, group: int, k: int) -> list[tuple[float, int, int]]:
        heap = self.heaps.get((group, k))
        if heap is None:
            heap = [(self.avail[u][k - 1], u, self.version[u]) for u in self.pool.group_units[group]]
            heapq.heapify(heap)
            self.heaps[(group, k)] = heap
            self.built.setdefault(group, []).append(k)
        return heap

    def place(self, job: JobRequest, duration: float, not_before: float) -> float | None:
        """Plan ``job`` at its earliest start (>= ``not_before``) and return it; None if no
        set of up nodes can ever hold it. Its nodes are then in :attr:`last_nodes`. A gang of one
        kind (:meth:`~.pool.Pool.kinds`) goes on the GPU model where it starts first (the first
        by name on a tie)."""
        pool = self.pool
        self.last_nodes = ()
        k, m = job.gpus_per_node, job.nodes
        elig = pool.eligibility(job)
        if elig.nodes < m:
            return None
        if m == 1 and len(elig.groups) == 1:
            heap = self._heap(elig.groups[0], k)
            version = self.version
            entry = heapq.heappop(heap)
            while entry[2] != version[entry[1]]:
                entry = heapq.heappop(heap)
            return self._take(entry[1:2], k, duration, not_before)
        best: tuple[float, list[int]] | None = None
        for kind in pool.kinds(job) or [job]:
            chosen = self._choose(kind)
            if chosen:
                at = max(self.avail[u][k - 1] for u in chosen)
                if best is None or at < best[0]:
                    best = (at, chosen)
        if best is None:
            return None
        return self._take(best[1], k, duration, not_before)

    def _choose(self, job: JobRequest) -> list[int] | None:
        """The ``nodes`` units (distinct nodes) where ``job`` could start first, or None; the heaps
        are left as they were."""
        pool = self.pool
        k, m = job.gpus_per_node, job.nodes
        elig = pool.eligibility(job)
        if elig.nodes < m:
            return None
        popped: list[tuple[tuple[float, int, int], list]] = []
        for group in elig.groups:
            heap = self._heap(group, k)
            taken = 0
            while heap and taken < m:
                entry = heapq.heappop(heap)
                if entry[2] != self.version[entry[1]]:
                    continue
                popped.append((entry, heap))
                taken += 1
        popped.sort(key=lambda p: p[0])
        chosen, nodes = [], set()
        for entry, heap in popped:
            node_id = pool.units[entry[1]].node.node_id
            if len(chosen) < m and node_id not in nodes:
                chosen.append(entry[1])
                nodes.add(node_id)
            heapq.heappush(heap, entry)  # still valid until _take moves the unit's version on
        return chosen if len(chosen) == m else None

    def _take(self, chosen: list[int], k: int, duration: float, not_before: float) -> float:
        """Give ``k`` GPUs of each chosen unit from their common start; returns the start."""
        pool = self.pool
        start = max(not_before, max(self.avail[u][k - 1] for u in chosen))
        self.last_nodes = tuple(pool.units[u].node.node_id for u in chosen)
        end = start + duration
        for u in chosen:
            self.avail[u] = sorted(self.avail[u][k:] + [end] * k)
            self.version[u] += 1
            group = pool.units[u].group
            for kk in self.built.get(group, ()):
                heapq.heappush(self.heaps[(group, kk)], (self.avail[u][kk - 1], u, self.version[u]))
        return start
