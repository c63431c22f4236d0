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

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .matching import gpu_fits, model_trials, node_could_ever_hold, nodes_able, one_kind
from .priority import planned_end
from .profile import INF, Profile
from .types import GpuSlot, JobRequest, NodeView


@dataclass(slots=True)
class Unit:
    """GPUs of one model and memory size on one node."""

    idx: int
    node: NodeView
    model: str
    memory_mib: int
    gpus: list[GpuSlot]
    free_ids: list[int]          # GPU ids free now and not yet given this cycle, ascending
    ends: list[float]            # planned ends (> now) of the held GPUs, ascending
    free0: int = 0               # GPUs free at the start of the cycle
    group: int = 0
    holds: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, count)
    lends: list[float] | None = None  # ends of the held GPUs by their time limits (None: same as ends)
    lholds: list[tuple[float, float, int]] = field(default_factory=list)  # placements by their time limits

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
    return (job.gpu_models, job.gpu_memory_mib, job.cpus, job.memory_mib, job.needs_runtime, job.gpus_per_node,
            job.mixed_models, job.only_model)


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
        up = [n for n in nodes if n.state == "up" and n.gpus]
        up.sort(key=_node_order)
        units: list[Unit] = []
        self.units = units
        self.cpus_free: dict[int, int] = {}
        self.memory_free: dict[int, int] = {}
        group_ids: dict[tuple, int] = {}
        self.group_units: list[list[int]] = []
        self.group_sample: list[Unit] = []
        max_size = free_total = 0
        multi = False
        free_counts: list[tuple[int, int]] = []
        for node in up:
            self.cpus_free[node.node_id] = node.cpus_free
            self.memory_free[node.node_id] = node.memory_free_mib
            classes = _node_units(node, now, use_predictions)
            if len(classes) > 1:
                multi = True
            for model, memory_mib, gpus, free_ids, ends, lends in classes:
                idx = len(units)
                free = len(free_ids)
                unit = Unit(idx, node, model, memory_mib, gpus, free_ids, ends, free, lends=lends)
                key = (model, memory_mib, len(gpus), node.cpus_total, node.memory_total_mib, bool(node.runtimes))
                group = group_ids.get(key)
                if group is None:
                    group = group_ids[key] = len(self.group_units)
                    self.group_units.append([])
                    self.group_sample.append(unit)
                unit.group = group
                self.group_units[group].append(idx)
                units.append(unit)
                if len(gpus) > max_size:
                    max_size = len(gpus)
                if free:
                    free_total += free
                    free_counts.append((free, idx))
        self.max_size = max_size
        self.buckets: list[set[int]] = [set() for _ in range(max_size + 1)]
        for free, idx in free_counts:
            self.buckets[free].add(idx)
        self.free_total = free_total
        self.multi_unit_nodes = multi
        self.holders: dict[str, list[int]] = defaultdict(list)  # input identity -> units whose node's cache holds it
        for unit in units:
            for key in unit.node.cached:
                self.holders[key].append(unit.idx)
        self._profiles: dict[int, Profile] = {}
        self._lprofiles: dict[int, Profile] = {}
        self._eligibility: dict[tuple, Eligibility] = {}
        self.models = sorted({unit.model for unit in units})  # GPU models of the up nodes

    def kinds(self, job: JobRequest) -> list[JobRequest] | None:
        """The trials of a gang of one kind (:func:`~.matching.one_kind`): one per GPU model of the
        up nodes, each limited to it; None for any other job, or where the up nodes have one model
        (the job as it is keeps to it: a replay's pool, most live pools)."""
        return model_trials(job, self.models) if len(self.models) > 1 and one_kind(job) else None

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
                                                  memory_total_mib=node.memory_total_mib,
                                                  runtimes=node.runtimes))

    def could_hold_somewhere(self, job: JobRequest) -> bool:
        """True if enough nodes the caller knows, in any state, could ever hold ``job`` (a gang of
        one kind: enough of one GPU model)."""
        return nodes_able(job, self.all_nodes) >= job.nodes

    # --- now ------------------------------------------------------------------

    def fit_now(self, job: JobRequest, allowed: Callable[[Unit], bool] | None = None,
                prefer: set[int] | None = None) -> tuple[list[int] | None, str]:
        """Best-fit gang choice of units free now, or None with why (:meth:`_fit_now`).

        A gang of one kind (:meth:`kinds`) is fitted on each GPU model apart; of the models that
        hold it now, the one whose chosen units have the fewest GPUs free wins (best fit), then the
        first by name. Why, besides :meth:`_fit_now`'s: ``"one_model"``, the GPUs free now would
        hold it only across models.
        """
        kinds = self.kinds(job)
        if kinds is None:
            return self._fit_now(job, allowed, prefer)
        best: tuple[int, list[int]] | None = None
        whys = set()
        for kind in kinds:
            units, why = self._fit_now(kind, allowed, prefer)
            if units is None:
                whys.add(why)
                continue
            free = sum(len(self.units[u].free_ids) for u in units)
            if best is None or free < best[0]:
                best = (free, units)
        if best is not None:
            return best[1], ""
        for why in ("reservation", "resources"):
            if why in whys:
                return None, why
        if self._fit_now(job, allowed, prefer)[0] is not None:
            return None, "one_model"
        return None, "gpus"

    def _fit_now(self, job: JobRequest, allowed: Callable[[Unit], bool] | None = None,
                 prefer: set[int] | None = None) -> tuple[list[int] | None, str]:
        """Best-fit gang choice of units free now for ``job`` as it is, or None with why.

        Best fit: the units with the fewest free GPUs left over, which keeps
        whole nodes free for big jobs; ties to units in ``prefer`` (the
        reserved ones: a job that ends before a reservation starts leaves
        the unreserved GPUs to longer jobs), then to nodes whose cache holds more of the job's
        inputs (:meth:`affinity`), then to smaller nodes, then by name.
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
        affine = self.affinity(job)
        for c in range(k, self.max_size + 1):
            bucket = self.buckets[c]
            if not bucket:
                continue
            candidates = bucket if elig.units is None else bucket & elig.units
            if affine:
                prefer = prefer or set()
                order = sorted(candidates, key=lambda u: (u not in prefer, -affine.get(u, 0), u))
            else:
                order = sorted(candidates) if not prefer else sorted(candidates, key=lambda u: (u not in prefer, u))
            for u in order:
                unit = self.units[u]
                node_id = unit.node.node_id
                if node_id in nodes_used:
                    continue
                if self.cpus_free[node_id] < job.cpus or self.memory_free[node_id] < job.memory_mib:
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

    def affinity(self, job: JobRequest) -> dict[int, int]:
        """``{unit idx: inputs of job its node's cache holds}`` for the units holding any (empty when
        the job has no inputs or no node reported a cache): the cache-affinity tie-break of
        :meth:`fit_now` and :meth:`_pick`, after best fit, never before it; the count of
        :func:`~.matching.cache_affinity`, from an index built once per cycle."""
        if not job.inputs or not self.holders:
            return {}
        out: dict[int, int] = {}
        for key in set(job.inputs):
            for u in self.holders.get(key, ()):
                out[u] = out.get(u, 0) + 1
        return out

    def take_now(self, job: JobRequest, units: list[int], duration: float,
                 limit: float | None = None) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Give the job its GPUs now for ``duration`` planned seconds (``limit``: its time limit, for
        the plan by time limits); returns the placement's nodes."""
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
            self.memory_free[unit.node.node_id] -= job.memory_mib
            self._hold(unit, now, now + duration, k)
            self._lhold(unit, now, now + (duration if limit is None else limit), k)
            out.append((unit.node.node_id, tuple(ids)))
        return tuple(out)

    # --- later ----------------------------------------------------------------

    def profile(self, unit: Unit, limits: bool = False) -> Profile:
        """The unit's availability profile, with every hold so far; ``limits``: the plan in which
        everything runs to its time limit and only placements are held (EASY's)."""
        if limits and unit.lends is not None:
            return self._cached_profile(self._lprofiles, unit, unit.lends, unit.lholds)
        return self._cached_profile(self._profiles, unit, unit.ends, unit.holds)

    def _cached_profile(self, cache: dict[int, Profile], unit: Unit, ends, holds) -> Profile:
        """The unit's profile from ``cache``, built from ``ends`` and ``holds`` on first use."""
        prof = cache.get(unit.idx)
        if prof is None:
            prof = Profile(self.now, unit.free0, ends)
            for start, end, count in holds:
                prof.hold(start, end, count)
            cache[unit.idx] = prof
        return prof

    def _lhold(self, unit: Unit, start: float, end: float, count: int) -> None:
        if unit.lends is None:
            return
        unit.lholds.append((start, end, count))
        prof = self._lprofiles.get(unit.idx)
        if prof is not None:
            prof.hold(start, end, count)

    def _hold(self, unit: Unit, start: float, end: float, count: int) -> None:
        unit.holds.append((start, end, count))
        prof = self._profiles.get(unit.idx)
        if prof is not None:
            prof.hold(start, end, count)

    def earliest(self, job: JobRequest, duration: float, limits: bool = False) -> tuple[float | None, list[int]]:
        """Earliest start (>= now) at which ``job`` fits for ``duration`` s by the profiles,
        with the best-fit units; ``(None, [])`` if no set of up nodes can ever hold it. A gang
        of one kind: the earliest over its GPU models (:meth:`kinds`), the first by name on a tie.
        """
        kinds = self.kinds(job)
        if kinds is None:
            return self._earliest(job, duration, limits)
        best: tuple[float | None, list[int]] = (None, [])
        for kind in kinds:
            start, units = self._earliest(kind, duration, limits)
            if start is not None and (best[0] is None or start < best[0]):
                best = (start, units)
        return best

    def _earliest(self, job: JobRequest, duration: float, limits: bool) -> tuple[float | None, list[int]]:
        """:meth:`earliest` for ``job`` as it is.

        A sweep over each eligible unit's feasible start windows: the first
        time that ``nodes`` distinct nodes are inside a window.
        """
        k, m = job.gpus_per_node, job.nodes
        elig = self.eligibility(job)
        if elig.nodes < m:
            return None, []
        units = [self.units[u] for g in elig.groups for u in self.group_units[g]]
        windows_of = self._windows
        if m == 1:
            best, best_units = INF, []
            for unit in units:
                windows = windows_of(unit, k, duration, limits)
                t = windows[0][0] if windows else INF
                if t < best:
                    best, best_units = t, [unit]
                elif t == best and t < INF:
                    best_units.append(unit)
            if best == INF:
                return None, []
            return best, self._pick(best_units, best, duration, k, 1, limits, self.affinity(job))
        spans = [(unit, windows_of(unit, k, duration, limits)) for unit in units]
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
                return t, self._pick(inside, t, duration, k, m, limits, self.affinity(job))
        return None, []

    def _untouched(self, unit: Unit, limits: bool) -> list[float] | None:
        """The unit's ends if nothing is held on it this cycle (its profile is then free0 rising
        at each end, so windows and lows need no profile); else None."""
        if limits and unit.lends is not None:
            return None if unit.lholds else unit.lends
        return None if unit.holds else unit.ends

    def _windows(self, unit: Unit, k: int, duration: float, limits: bool) -> list[tuple[float, float]]:
        """``Profile.windows`` of the unit, without building a profile for an untouched unit."""
        ends = self._untouched(unit, limits)
        if ends is None:
            return self.profile(unit, limits).windows(k, duration)
        need = k - unit.free0
        if need <= 0:
            return [(self.now, INF)]
        if need > len(ends):
            return []
        return [(ends[need - 1], INF)]

    def _pick(self, units: list[Unit], start: float, duration: float, k: int, m: int,
              limits: bool = False, affine: dict[int, int] | None = None) -> list[int]:
        """Of units that can hold a rank from ``start``, the ``m`` that fit best, on distinct nodes.

        Best fit at ``start``; ties to the units with the fewest GPUs free
        now, so the GPUs free now stay free for backfill (EASY's "extra"); then to the units whose
        node's cache holds more of the job's inputs (``affine``, see :meth:`affinity`).
        """
        ranked = []
        affine = affine or {}
        for unit in units:
            ends = self._untouched(unit, limits)
            if ends is not None:  # free count only rises: lowest at start, free[0] = free0
                ranked.append((unit.free0 + bisect_right(ends, start) - k, unit.free0, -affine.get(unit.idx, 0),
                               unit.idx, unit))
                continue
            prof = self.profile(unit, limits)
            ranked.append((prof.min_free(start, start + duration) - k, prof.free[0], -affine.get(unit.idx, 0),
                           unit.idx, unit))
        ranked.sort(key=lambda r: r[:4])
        chosen, nodes = [], set()
        for *_key, unit in ranked:
            if unit.node.node_id not in nodes:
                chosen.append(unit.idx)
                nodes.add(unit.node.node_id)
                if len(chosen) == m:
                    break
        return chosen

    def reserve_limits(self, job: JobRequest, start: float, units: list[int], duration: float) -> None:
        """Hold the job's GPUs from ``start`` for ``duration`` s in the plan by time limits only."""
        for u in units:
            self._lhold(self.units[u], start, start + duration, job.gpus_per_node)

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


# (node id, use_predictions) -> (the node's GPU slots, built at, valid until, units). A memo, not
# state: an entry is used only for the very same slots (compared by value) and while ``now`` lies in
# [built at, valid until), where nothing in it can change: no held GPU has come free and no
# prediction has been overrun. Pools of a few thousand nodes rebuild only the nodes whose GPUs changed.
_NODE_MEMO: dict[tuple[int, bool], tuple[tuple[GpuSlot, ...], float, float, list]] = {}
_NODE_MEMO_MAX = 100_000


def _node_units(node: NodeView, now: float, use_predictions: bool) -> list:
    """``[(model, memory_mib, gpus, free_ids, ends, lends), ...]`` of one node at ``now``.

    ``ends``: planned ends of the held GPUs (predicted under ``use_predictions``), ``lends``: by
    their time limits (None without predictions). The lists are shared between cycles: never mutated.
    """
    snap = tuple(node.gpus)
    key = (node.node_id, use_predictions)
    memo = _NODE_MEMO.get(key)
    if memo is not None and memo[1] <= now < memo[2] and memo[0] == snap:
        return memo[3]
    out = []
    valid_until = INF
    for (model, memory_mib), gpus in _classes(node.gpus):
        free_ids, ends, lends = [], [], []
        for g in gpus:
            free_at = g.free_at
            if free_at <= now:
                free_ids.append(g.gpu_id)
                continue
            if free_at < valid_until:
                valid_until = free_at
            lends.append(free_at)
            expected = g.expected_free_at
            if use_predictions and expected is not None and expected < free_at:
                if expected > now:
                    ends.append(expected)
                    if expected < valid_until:
                        valid_until = expected
                else:  # overrun: the planned end moves in steps (or with the clock, start unknown)
                    end = planned_end(free_at, expected, now, g.started_at)
                    ends.append(end)
                    valid_until = min(valid_until, end) if g.started_at is not None else now
            else:
                ends.append(free_at)
        ends.sort()
        free_ids.sort()
        lends.sort()
        out.append((model, memory_mib, gpus, free_ids, ends, lends if use_predictions else None))
    if len(_NODE_MEMO) >= _NODE_MEMO_MAX:
        _NODE_MEMO.clear()
    _NODE_MEMO[key] = (snap, now, valid_until, out)
    return out


def _node_order(node: NodeView) -> tuple[int, str]:
    return len(node.gpus), node.name


def _classes(gpus: list[GpuSlot]) -> list[tuple[tuple[str, int], list[GpuSlot]]]:
    """The node's GPUs grouped by (model, memory)."""
    kinds = {(g.model, g.memory_mib) for g in gpus}
    if len(kinds) == 1:
        return [(kinds.pop(), gpus)]
    classes: dict[tuple[str, int], list[GpuSlot]] = defaultdict(list)
    for g in gpus:
        classes[(g.model, g.memory_mib)].append(g)
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
