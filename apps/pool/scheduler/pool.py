"""The pool as one cycle plans on it: nodes that are up, their GPUs grouped into units.

A *unit* is the GPUs of one model and memory size on one node (most nodes
have one unit). A rank of a job takes all its GPUs from one unit, and the
ranks of a gang sit on distinct nodes. The planner counts GPUs per unit
instead of walking GPU objects, and keeps:

- ``buckets[c]``: the units with exactly ``c`` GPUs free now, so a job that
  cannot start is turned away in O(1) once the pool is full;
- a :class:`~.profile.Profile` per unit, built on first use, for
  reservations and the backfill test;
- holds (placements and reservations) per unit, which the estimate walk
  (:mod:`.estimates`) starts from.

CPUs and memory are checked for placements now; plans for later count GPUs only.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .matching import gpu_fits, node_could_ever_hold
from .priority import planned_end
from .profile import INF, Profile
from .types import GpuSlot, JobRequest, NodeView


@dataclass(slots=True)
class Unit:
    """GPUs of one model and memory size on one node."""

    idx: int
    node: NodeView
    model: str
    memory_mb: int
    gpus: list[GpuSlot]
    free_ids: list[int]          # GPU ids free now and not yet given this cycle, ascending
    ends: list[float]            # planned ends (> now) of the held GPUs, ascending
    free0: int = 0               # GPUs free at the start of the cycle
    group: int = 0
    holds: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, count)

    @property
    def size(self) -> int:
        return len(self.gpus)


@dataclass(slots=True)
class Eligibility:
    """Where a job shape can ever go: groups, units (None = every unit) and how many distinct nodes."""

    groups: list[int]
    units: frozenset[int] | None
    nodes: int


def shape_of(job: JobRequest) -> tuple:
    """What decides where a job can go (its eligibility is cached per shape)."""
    return (job.gpu_models, job.gpu_memory_mb, job.cpus, job.memory_bytes, job.needs_runtime, job.gpus_per_node)


class Pool:
    """Working copy of the pool for one cycle.

    Args:
        nodes: every node the caller knows; only ``up`` nodes take work.
        now: the clock (epoch s).
        use_predictions: plan held GPUs to come free at the holder's
            predicted end (``e31``) rather than its time limit (``fifo``, ``easy``).
    """

    def __init__(self, nodes: Sequence[NodeView], now: float, *, use_predictions: bool):
        self.now = now
        self.all_nodes = list(nodes)
        up = sorted((n for n in nodes if n.state == "up" and n.gpus), key=lambda n: (len(n.gpus), n.name))
        self.units: list[Unit] = []
        self.cpus_free = {n.node_id: n.cpus_free for n in up}
        self.memory_free = {n.node_id: n.memory_free_bytes for n in up}
        group_ids: dict[tuple, int] = {}
        self.group_units: list[list[int]] = []
        self.group_sample: list[Unit] = []
        for node in up:
            for (model, memory_mb), gpus in _classes(node.gpus):
                free_ids, ends = [], []
                for g in gpus:
                    if g.free_at <= now:
                        free_ids.append(g.gpu_id)
                    elif use_predictions:
                        ends.append(planned_end(g.free_at, g.expected_free_at, now))
                    else:
                        ends.append(g.free_at)
                ends.sort()
                free_ids.sort()
                unit = Unit(len(self.units), node, model, memory_mb, gpus, free_ids, ends, len(free_ids))
                key = (model, memory_mb, len(gpus), node.cpus_total, node.memory_total_bytes, bool(node.runtimes))
                group = group_ids.get(key)
                if group is None:
                    group = group_ids[key] = len(self.group_units)
                    self.group_units.append([])
                    self.group_sample.append(unit)
                unit.group = group
                self.group_units[group].append(unit.idx)
                self.units.append(unit)
        self.max_size = max((u.size for u in self.units), default=0)
        self.buckets: list[set[int]] = [set() for _ in range(self.max_size + 1)]
        for unit in self.units:
            if unit.free_ids:
                self.buckets[len(unit.free_ids)].add(unit.idx)
        self.free_total = sum(len(u.free_ids) for u in self.units)
        self.multi_unit_nodes = len({u.node.node_id for u in self.units}) < len(self.units)
        self._profiles: dict[int, Profile] = {}
        self._eligibility: dict[tuple, Eligibility] = {}

    # --- where a job can go -------------------------------------------------

    def eligibility(self, job: JobRequest) -> Eligibility:
        """Units of up nodes that could ever hold one rank of ``job`` (cached per shape)."""
        key = shape_of(job)
        found = self._eligibility.get(key)
        if found is None:
            groups = [g for g, sample in enumerate(self.group_sample) if self._group_fits(job, sample)]
            units = [u for g in groups for u in self.group_units[g]]
            nodes = len({self.units[u].node.node_id for u in units})
            everything = len(units) == len(self.units)
            found = Eligibility(groups, None if everything else frozenset(units), nodes)
            self._eligibility[key] = found
        return found

    @staticmethod
    def _group_fits(job: JobRequest, sample: Unit) -> bool:
        if not gpu_fits(job, sample.gpus[0]) or sample.size < job.gpus_per_node:
            return False
        node = sample.node
        return node_could_ever_hold(job, NodeView(node.node_id, node.name, node.state, sample.gpus,
                                                  cpus_total=node.cpus_total,
                                                  memory_total_bytes=node.memory_total_bytes,
                                                  runtimes=node.runtimes))

    def could_hold_somewhere(self, job: JobRequest) -> bool:
        """True if enough nodes the caller knows, in any state, could ever hold ``job``."""
        return sum(1 for n in self.all_nodes if node_could_ever_hold(job, n)) >= job.nodes

    # --- now ------------------------------------------------------------------

    def fit_now(self, job: JobRequest, allowed: Callable[[Unit], bool] | None = None,
                prefer: set[int] | None = None) -> tuple[list[int] | None, str]:
        """Best-fit gang choice of units free now, or None with why.

        Best fit: the units with the fewest free GPUs left over, which keeps
        whole nodes free for big jobs; ties to units in ``prefer`` (the
        reserved ones: a job that ends before a reservation starts leaves
        the unreserved GPUs to longer jobs), then to smaller nodes, then by name.
        ``allowed(unit)`` may refuse a unit (it would delay a reservation).
        Why: ``""`` (found), ``"gpus"`` (not enough GPUs free now),
        ``"resources"`` (GPUs free but not the CPUs or memory),
        ``"reservation"`` (only by delaying a reserved job).
        """
        k, m = job.gpus_per_node, job.nodes
        if self.free_total < k * m or k > self.max_size:
            return None, "gpus"
        elig = self.eligibility(job)
        if elig.nodes < m:
            return None, "gpus"
        chosen: list[int] = []
        nodes_used: set[int] = set()
        why = "gpus"
        for c in range(k, self.max_size + 1):
            bucket = self.buckets[c]
            if not bucket:
                continue
            candidates = bucket if elig.units is None else bucket & elig.units
            for u in sorted(candidates) if not prefer else sorted(candidates, key=lambda u: (u not in prefer, u)):
                unit = self.units[u]
                node_id = unit.node.node_id
                if node_id in nodes_used:
                    continue
                if self.cpus_free[node_id] < job.cpus or self.memory_free[node_id] < job.memory_bytes:
                    why = "resources" if why == "gpus" else why
                    continue
                if allowed is not None and not allowed(unit):
                    why = "reservation"
                    continue
                chosen.append(u)
                nodes_used.add(node_id)
                if len(chosen) == m:
                    return chosen, ""
        return None, why

    def take_now(self, job: JobRequest, units: list[int], duration: float) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Give the job its GPUs now for ``duration`` planned seconds; returns the placement's nodes."""
        k, now = job.gpus_per_node, self.now
        out = []
        for u in units:
            unit = self.units[u]
            c = len(unit.free_ids)
            self.buckets[c].discard(u)
            if c - k:
                self.buckets[c - k].add(u)
            ids, unit.free_ids = unit.free_ids[:k], unit.free_ids[k:]
            self.free_total -= k
            self.cpus_free[unit.node.node_id] -= job.cpus
            self.memory_free[unit.node.node_id] -= job.memory_bytes
            self._hold(unit, now, now + duration, k)
            out.append((unit.node.node_id, tuple(ids)))
        return tuple(out)

    # --- later ----------------------------------------------------------------

    def profile(self, unit: Unit) -> Profile:
        """The unit's availability profile, with every hold so far."""
        prof = self._profiles.get(unit.idx)
        if prof is None:
            prof = Profile(self.now, unit.free0, unit.ends)
            for start, end, count in unit.holds:
                prof.hold(start, end, count)
            self._profiles[unit.idx] = prof
        return prof

    def _hold(self, unit: Unit, start: float, end: float, count: int) -> None:
        unit.holds.append((start, end, count))
        prof = self._profiles.get(unit.idx)
        if prof is not None:
            prof.hold(start, end, count)

    def earliest(self, job: JobRequest, duration: float) -> tuple[float | None, list[int]]:
        """Earliest start (>= now) at which ``job`` fits for ``duration`` s by the profiles,
        with the best-fit units; ``(None, [])`` if no set of up nodes can ever hold it.

        A sweep over each eligible unit's feasible start windows: the first
        time that ``nodes`` distinct nodes are inside a window.
        """
        k, m = job.gpus_per_node, job.nodes
        elig = self.eligibility(job)
        if elig.nodes < m:
            return None, []
        units = [self.units[u] for g in elig.groups for u in self.group_units[g]]
        profile = self.profile
        if m == 1:
            best, best_units = INF, []
            for unit in units:
                t = profile(unit).first_start(k, duration)
                if t < best:
                    best, best_units = t, [unit]
                elif t == best and t < INF:
                    best_units.append(unit)
            if best == INF:
                return None, []
            return best, self._pick(best_units, best, duration, k, 1)
        spans = [(unit, profile(unit).windows(k, duration)) for unit in units]
        by_node: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for unit, windows in spans:
            by_node[unit.node.node_id].extend(windows)
        events = []
        for windows in by_node.values():
            for a, b in _merge(windows) if self.multi_unit_nodes else windows:
                events.append((a, 0))
                events.append((b, 1))
        events.sort()
        count = 0
        for t, kind in events:
            count += 1 if kind == 0 else -1
            if kind == 0 and count >= m:
                inside = [unit for unit, windows in spans if any(a <= t <= b for a, b in windows)]
                return t, self._pick(inside, t, duration, k, m)
        return None, []

    def _pick(self, units: list[Unit], start: float, duration: float, k: int, m: int) -> list[int]:
        """Of units that can hold a rank from ``start``, the ``m`` that fit best, on distinct nodes.

        Best fit at ``start``; ties to the units with the fewest GPUs free
        now, so the GPUs free now stay free for backfill (EASY's "extra").
        """
        ranked = []
        for unit in units:
            prof = self.profile(unit)
            ranked.append((prof.min_free(start, start + duration) - k, prof.free[0], unit.idx, unit))
        ranked.sort(key=lambda r: r[:3])
        chosen, nodes = [], set()
        for *_key, unit in ranked:
            if unit.node.node_id not in nodes:
                chosen.append(unit.idx)
                nodes.add(unit.node.node_id)
                if len(chosen) == m:
                    break
        return chosen

    def reserve(self, job: JobRequest, start: float, units: list[int],
                duration: float) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Hold the job's GPUs in the plan from ``start`` for ``duration`` s; returns nodes with the
        GPUs expected free first (a hint: the plan counts GPUs, not which ones)."""
        k = job.gpus_per_node
        out = []
        for u in units:
            unit = self.units[u]
            self._hold(unit, start, start + duration, k)
            ids = unit.free_ids[:k]
            if len(ids) < k:
                busy = sorted([(g.free_at, g.gpu_id) for g in unit.gpus if g.free_at > self.now])
                ids += [gpu_id for _end, gpu_id in busy[: k - len(ids)]]
            out.append((unit.node.node_id, tuple(sorted(ids))))
        return tuple(out)


def _classes(gpus: list[GpuSlot]) -> list[tuple[tuple[str, int], list[GpuSlot]]]:
    """The node's GPUs grouped by (model, memory)."""
    kinds = {(g.model, g.memory_mb) for g in gpus}
    if len(kinds) == 1:
        return [(kinds.pop(), gpus)]
    classes: dict[tuple[str, int], list[GpuSlot]] = defaultdict(list)
    for g in gpus:
        classes[(g.model, g.memory_mb)].append(g)
    return sorted(classes.items())


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of closed intervals (for nodes with several units)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
