"""Data in the replay (issue 14 item 5): input sizes on trace jobs, per-node caches, staging on the meter.

Traces carry no input sizes, so they are generated deterministically from the trace:

- each account has 1 to 3 data sets (how many: a hash of the account name); a data set's size is
  drawn log-uniformly between ``size_min_bytes`` and ``size_max_bytes`` (default 1 GB to 100 GB,
  decimal units) from a hash of (seed, account, index); every job of the account reads one of
  them (a hash of the job id), so an account's jobs share their data;
- each node has an LRU cache of ``cache_bytes`` (default 200 GB);
- staging moves ``bytes / rate_bps`` seconds (default 125 MB/s, 1 Gbit/s), the same rate on every
  node (so the core's measured-rate path is not exercised: every node reports the default).

A job started on a node whose cache holds its data set stages nothing; else it stages on the
meter: it holds its GPUs ``bytes / rate`` seconds before its run (the slowest of its nodes for a
gang), billed as GPU-seconds (GPUs x seconds), and its data set enters the node's cache. A
pre-stage still in flight when the job starts leaves only its remaining seconds on the meter.

With ``prestage`` on, after every cycle the core's plan (:func:`apps.scheduling.core.prestage.prestage_targets`,
the live site's very function and bounds) names the jobs to pre-stage and their planned nodes; each
node fetches them one after another (one download at a time per node, meter off), into its cache
when done. Pre-stage downloads and on-meter staging do not share bandwidth (a simplification). With
``affinity`` on, every node's view carries its cache's contents, so the core's cache-affinity
tie-break (:meth:`apps.scheduling.core.pool.Pool.affinity`) can prefer it; off, views carry nothing.

Figures (:meth:`StagingModel.figures`): ``staging_gpu_h`` (GPU-hours billed for staging),
``staging_share`` (of all GPU-hours billed), ``cache_hit_rate`` (node starts that found the data in
the cache, over node starts), ``prestage_partial`` (node starts that found it still in flight),
``prestaged_bytes`` and ``evictions``.
"""
from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from apps.scheduling.core import JobRequest, NodeView, PolicyConfig
from apps.scheduling.core.prestage import DEFAULT_PER_CYCLE, DEFAULT_PER_NODE, prestage_targets
from apps.scheduling.core.types import Decision

from .engine import replay
from .metrics import JobOutcome, summarise
from .runner import pool_shape
from .swf import load_jobs

GB = 10**9


@dataclass(frozen=True)
class DataConfig:
    """How data is modelled (sizes in bytes, rate in bytes per second)."""

    prestage: bool = True
    affinity: bool = True
    rate_bps: float = 125e6
    cache_bytes: int = 200 * GB
    size_min_bytes: int = 1 * GB
    size_max_bytes: int = 100 * GB
    max_sets: int = 3
    seed: str = "e31-data"
    per_node: int = DEFAULT_PER_NODE
    per_cycle: int = DEFAULT_PER_CYCLE


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def data_sets(account: str, config: DataConfig) -> list[tuple[str, int]]:
    """The account's data sets: ``[(key, size in bytes)]``, 1 to ``max_sets`` of them."""
    count = 1 + int(_unit(config.seed, "count", account) * config.max_sets)
    lo, hi = math.log(config.size_min_bytes), math.log(config.size_max_bytes)
    return [(f"ds:{account}:{i}", int(math.exp(lo + (hi - lo) * _unit(config.seed, "size", account, i))))
            for i in range(count)]


def job_data(job_id: int, account: str, config: DataConfig) -> tuple[str, int]:
    """The one data set job ``job_id`` of ``account`` reads: ``(key, bytes)``."""
    sets = data_sets(account, config)
    return sets[int(_unit(config.seed, "job", job_id) * len(sets))]


class StagingModel:
    """Per-node LRU caches, pre-stage downloads and on-meter staging during one replay
    (the :class:`~.engine.StagingHooks` of :func:`~.engine.replay_jobs`)."""

    def __init__(self, config: DataConfig | None = None, *, sizes: Mapping[str, int] | None = None) -> None:
        """``sizes``: bytes per data key of requests that already carry ``inputs`` (tests); else
        :meth:`requests` attaches generated data sets."""
        self.config = config or DataConfig()
        self.sizes: dict[str, int] = dict(sizes or {})
        self.caches: dict[int, OrderedDict[str, int]] = {}
        self.used: dict[int, int] = {}
        self.inflight: dict[tuple[int, str], float] = {}  # (node, key) -> when its pre-stage is done
        self.channel_free: dict[int, float] = {}
        self.views: dict[int, NodeView] = {}
        self.dirty: set[int] = set()
        self.staging_gpu_s = 0.0
        self.node_starts = 0
        self.hits = 0
        self.partial = 0
        self.prestaged_bytes = 0
        self.evictions = 0
        self.staged: dict[int, float] = {}  # job id -> seconds it staged on the meter

    # --- hooks ------------------------------------------------------------------

    def requests(self, requests: list[JobRequest]) -> list[JobRequest]:
        """The requests with their generated data set as ``inputs`` and ``input_bytes``."""
        out = []
        for r in requests:
            key, size = job_data(r.job_id, r.account, self.config)
            self.sizes[key] = size
            out.append(replace(r, inputs=(key,), input_bytes=size))
        return out

    def attach(self, views: list[NodeView]) -> None:
        """The replay's node views (changed in place to show cache contents when ``affinity`` is on)."""
        self.views = {v.node_id: v for v in views}
        for v in views:
            self.caches.setdefault(v.node_id, OrderedDict())
            self.used.setdefault(v.node_id, 0)
            v.staging_rate_bps = self.config.rate_bps

    def before_cycle(self, now: float) -> None:
        """Finish the pre-stages done by ``now``; show the caches to the core (affinity on)."""
        self._advance(now)
        if self.config.affinity:
            for node_id in self.dirty:
                self.views[node_id].cached = frozenset(self.caches[node_id])
        self.dirty.clear()

    def on_start(self, request: JobRequest, nodes: Sequence, now: float) -> float:
        """Seconds ``request`` stages on the meter when it starts at ``now`` on ``nodes``
        (``[(node_id, gpu_ids)]``); counts hits and the GPU-seconds billed for staging."""
        self._advance(now)
        wait = 0.0
        for node_id, _gpus in nodes:
            for key in request.inputs:
                self.node_starts += 1
                cache = self.caches[node_id]
                if key in cache:
                    cache.move_to_end(key)
                    self.hits += 1
                    continue
                done = self.inflight.get((node_id, key))
                if done is not None:
                    self.partial += 1
                    wait = max(wait, done - now)
                    continue
                size = self.sizes.get(key, 0)
                wait = max(wait, size / self.config.rate_bps)
                self._insert(node_id, key, size)
        gpus = request.gpus_per_node * request.nodes
        self.staging_gpu_s += wait * gpus
        self.staged[request.job_id] = wait
        return wait

    def after_cycle(self, decision: Decision, pending: Mapping[int, JobRequest], views: list[NodeView],
                    now: float) -> None:
        """Start the pre-stages the core's plan asks for (``prestage`` on)."""
        if not self.config.prestage:
            return
        plan = prestage_targets(decision, pending, views, now, default_rate_bps=self.config.rate_bps,
                                per_node=self.config.per_node, per_cycle=self.config.per_cycle)
        for job_id, node_ids in plan:
            for key in pending[job_id].inputs:
                for node_id in node_ids:
                    if key in self.caches[node_id] or (node_id, key) in self.inflight:
                        continue
                    size = self.sizes.get(key, 0)
                    begin = max(now, self.channel_free.get(node_id, now))
                    self.channel_free[node_id] = done = begin + size / self.config.rate_bps
                    self.inflight[(node_id, key)] = done
                    self.prestaged_bytes += size

    # --- inside -------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if not self.inflight:
            return
        done = sorted((t, nk) for nk, t in self.inflight.items() if t <= now)
        for _t, (node_id, key) in done:
            del self.inflight[(node_id, key)]
            if key not in self.caches[node_id]:
                self._insert(node_id, key, self.sizes.get(key, 0))

    def _insert(self, node_id: int, key: str, size: int) -> None:
        """Put ``key`` in the node's cache, evicting least recently used entries to fit; a data set
        larger than the whole cache is not kept."""
        cap = self.config.cache_bytes
        if size > cap:
            return
        cache = self.caches[node_id]
        while self.used[node_id] + size > cap and cache:
            _old, old_size = cache.popitem(last=False)
            self.used[node_id] -= old_size
            self.evictions += 1
        cache[key] = size
        self.used[node_id] += size
        self.dirty.add(node_id)

    def figures(self, run_gpu_s: float) -> dict:
        """The data figures of the replay (see the module docstring); ``run_gpu_s``: GPU-seconds of the runs."""
        billed = run_gpu_s + self.staging_gpu_s
        return {
            "prestage": self.config.prestage, "affinity": self.config.affinity,
            "staging_gpu_h": round(self.staging_gpu_s / 3600, 2),
            "staging_share": round(self.staging_gpu_s / billed, 5) if billed else None,
            "cache_hit_rate": round(self.hits / self.node_starts, 4) if self.node_starts else None,
            "prestage_partial": self.partial, "prestaged_tb": round(self.prestaged_bytes / 1e12, 3),
            "evictions": self.evictions,
        }


def simulate_data(path: str | Path, policy: str | PolicyConfig = "e31", *, nodes: int | None = None,
                  gpus_per_node: int | None = None, limit: int | None = None,
                  config: DataConfig | None = None) -> dict:
    """Replay the trace at ``path`` four times, pre-staging off/on x cache affinity off/on, with the
    data model of ``config`` (its ``prestage`` and ``affinity`` are overridden); returns
    ``{"trace", "policy", "nodes", "gpus_per_node", "limit", "data": {...config}, "rows": [...]}``, a row
    per run with :meth:`StagingModel.figures`, ``utilisation`` (GPU-time running jobs over the pool's
    GPU-time from the first submit to the last end, staging included in the span), ``busy`` (the same
    with staging counted as busy), ``bsld_mean`` and ``wait_mean_s``.

    Raises:
        OSError: the trace cannot be read. ValueError: a job larger than the pool.
    """
    base = config or DataConfig()
    nodes, gpus_per_node = pool_shape(path, nodes, gpus_per_node)
    if not nodes:
        nodes = 1 << 30
    jobs, _skipped = load_jobs(path, gpus_per_node, nodes, limit)
    if nodes == 1 << 30:
        nodes = max((j.nodes for j in jobs), default=1)
    rows = []
    for prestage, affinity in ((False, False), (False, True), (True, False), (True, True)):
        model = StagingModel(replace(base, prestage=prestage, affinity=affinity))
        wall = time.perf_counter()
        result = replay(jobs, nodes, gpus_per_node, policy, staging=model)
        rows.append({**data_row(result.outcomes, model, nodes * gpus_per_node),
                     "wall_s": round(time.perf_counter() - wall, 1)})
    return {"trace": Path(path).name, "policy": policy if isinstance(policy, str) else policy.name,
            "nodes": nodes, "gpus_per_node": gpus_per_node, "limit": limit,
            "data": {k: v for k, v in asdict(base).items() if k not in ("prestage", "affinity")}, "rows": rows}


def data_row(outcomes: Sequence[JobOutcome], model: StagingModel, total_gpus: int) -> dict:
    """One run's figures: the model's, utilisation and busy share (see :func:`simulate_data`), and the
    schedule's mean bounded slowdown and wait."""
    done = [o for o in outcomes if o.start is not None]
    run_gpu_s = sum(o.gpus_held * o.run_s for o in done)
    row = model.figures(run_gpu_s)
    if done:
        span = max(o.start + model.staged.get(o.job_id, 0.0) + o.run_s for o in done) - min(o.submit for o in done)
        cap = total_gpus * span
        row["utilisation"] = round(run_gpu_s / cap, 4) if cap > 0 else None
        row["busy"] = round((run_gpu_s + model.staging_gpu_s) / cap, 4) if cap > 0 else None
        summary = summarise(outcomes, total_gpus, with_estimates=False)
        row["bsld_mean"], row["wait_mean_s"] = summary["bsld_mean"], summary["wait_mean_s"]
    row["unstarted"] = len(outcomes) - len(done)
    return row


def format_data_table(result: dict) -> str:
    """The four rows of :func:`simulate_data` as a plain-text table."""
    head = (f"{result['trace']} ({result['limit'] or 'all'} jobs), {result['nodes']} x {result['gpus_per_node']} "
            f"GPUs, policy {result['policy']}, rate {result['data']['rate_bps'] / 1e6:g} MB/s, cache "
            f"{result['data']['cache_bytes'] / GB:g} GB/node")
    cols = ("prestage", "affinity", "staging_gpu_h", "staging_share", "cache_hit_rate", "prestage_partial",
            "utilisation", "busy", "bsld_mean", "wait_mean_s", "prestaged_tb", "evictions")
    lines = [head, "  ".join(f"{c:>14}" for c in cols)]
    for row in result["rows"]:
        lines.append("  ".join(f"{'on' if row.get(c) is True else 'off' if row.get(c) is False else row.get(c)!s:>14}"
                               for c in cols))
    return "\n".join(lines)
