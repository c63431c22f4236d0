"""The one replay loop (issue 14): a simulated clock driving the scheduling core, one cycle per event time.

Events are job arrivals (submit times) and completions (start + run). At each
distinct event time the loop applies the completions, then the arrivals,
then calls :func:`apps.scheduling.core.schedule` once and starts everything it
places; a job's start is that event time. A job that ends at the time it
starts (run 0) is an event at that same time: its GPUs come back and another
pass runs at the same instant (issue 14; classic event-driven EASY). No cycle
runs while nothing is queued (the live cycle does nothing then either).

The core's inputs are built by the same functions as the live site's
(:mod:`apps.scheduling.adapter`):

- each queued job's ``predicted_runtime_s`` = :func:`~apps.scheduling.core.predict_runtime`
  of its account's history (:func:`~apps.scheduling.core.remember_run`), refreshed
  whenever that history changes (the live cycle predicts at every cycle);
- each held GPU's ``free_at`` and ``expected_free_at`` =
  :func:`~apps.scheduling.core.held_until` of its run's start, limit and prediction; a run
  that outlives its prediction is planned by the core's
  :func:`~apps.scheduling.core.planned_end` at every cycle, live and replayed alike;
- ``usage`` = the decayed GPU-seconds of *every* association (project, user) charged so far
  (:class:`~apps.scheduling.core.UsageLedger`, the rule of
  :func:`~apps.scheduling.core.charge`; the live site passes every account's
  ``AccountUsage``): GPUs x run time charged when a job ends, with the policy's half-life.

:func:`replay_jobs` replays any jobs on any nodes (tests, generated workloads);
:func:`replay` maps an SWF trace's jobs onto a pool of identical nodes and
measures the schedule. State is kept incrementally: running jobs in a heap by
end time, node views changed in place only where a job starts or ends.
"""
from __future__ import annotations

import heapq
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from apps.scheduling.core import (
    FairShares,
    GpuSlot,
    JobRequest,
    NodeView,
    PolicyConfig,
    UsageLedger,
    held_until,
    job_request,
    job_usage_key,
    policy_resolve,
    predict_runtime,
    remember_run,
    schedule,
)

from .metrics import JobOutcome
from .swf import TraceJob

GPU_MODEL = "SIM-GPU"


class StagingHooks(Protocol):
    """What the replay asks of a data model (:class:`.staging.StagingModel`)."""

    def requests(self, requests: list[JobRequest]) -> list[JobRequest]: ...
    def attach(self, views: list[NodeView]) -> None: ...
    def before_cycle(self, now: float) -> None: ...
    def on_start(self, request: JobRequest, nodes: Sequence, now: float) -> float: ...
    def after_cycle(self, decision: Any, pending: Mapping[int, JobRequest], views: list[NodeView],
                    now: float) -> None: ...

GPU_MEMORY_MIB = 81920


@dataclass(frozen=True)
class ReplayJob:
    """A job to replay: the request (``submitted_at`` = arrival; its prediction is the replay's)
    and how long it really runs (s; cut at the time limit)."""

    request: JobRequest
    runtime_s: float


@dataclass
class ReplayResult:
    """Per job id: start (epoch s), first estimate (from the first cycle that saw it queued; its
    start if placed then; None if it had none), end; the cycles run and each one's wall time (s)."""

    started: dict[int, float] = field(default_factory=dict)
    first_estimate: dict[int, float | None] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)
    latest_min: dict[int, float] = field(default_factory=dict)  # the earliest "no later than" bound given
    cycles: int = 0
    cycle_s: list[float] = field(default_factory=list)
    core_s: float = 0.0


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def replay_jobs(jobs: Sequence[ReplayJob], nodes: Sequence[NodeView], policy: str | PolicyConfig = "e31", *,
                until: float | None = None, predict: bool = True, usage: Mapping[str, float] | None = None,
                schedule_fn: Callable | None = None,
                progress: Callable[[int, int], None] | None = None,
                staging: StagingHooks | None = None, fair: FairShares | None = None) -> ReplayResult:
    """Run ``jobs`` on ``nodes`` (all their GPUs free at the start; CPUs and memory as given) under ``policy``.

    ``until``: stop before the first event later than this (epoch s). ``predict``: False gives
    no job a prediction. ``usage``: GPU-seconds already charged per association
    (:func:`~apps.scheduling.core.usage_key`) at the first arrival. ``fair``: the fair tree's
    project and member shares (``fairshare="tree"``; None: all equal).
    ``staging``: the data model (:class:`.staging.StagingModel`): a start's staging seconds hold the GPUs
    (billed, not in the run-time history), and it sees each cycle before and after (issue 14 item 5).
    Stops when everything has run, when nothing can happen any more, or at ``until``.

    Raises:
        ValueError: duplicate job ids, or two GPUs with one id.
        RuntimeError: the core placed a job that is not queued, or on GPUs that are not free.
    """
    config = policy_resolve(policy)
    schedule_fn = schedule_fn or schedule
    pass_usage = _accepts(schedule_fn, "usage")
    pass_promises = _accepts(schedule_fn, "promises")
    arrivals = sorted(jobs, key=lambda j: (j.request.submitted_at, j.request.job_id))
    by_id: dict[int, ReplayJob] = {}
    for j in arrivals:
        if j.request.job_id in by_id:
            raise ValueError(f"duplicate job id {j.request.job_id}")
        by_id[j.request.job_id] = j

    views: list[NodeView] = []
    where: dict[int, tuple[NodeView, int]] = {}  # GPU id -> (its node's view, index in gpus)
    free_slot: dict[int, GpuSlot] = {}
    for n in nodes:
        gpus = []
        for g in n.gpus:
            if g.gpu_id in free_slot:
                raise ValueError(f"two GPUs with id {g.gpu_id}")
            free_slot[g.gpu_id] = GpuSlot(g.gpu_id, g.model, g.memory_mib, 0.0, None)
            gpus.append(free_slot[g.gpu_id])
        view = NodeView(n.node_id, n.name, n.state, gpus, n.cpus_free, n.memory_free_mib, n.cpus_total,
                        n.memory_total_mib, n.runtimes)
        views.append(view)
        for index, g in enumerate(gpus):
            where[g.gpu_id] = (view, index)
    holder: dict[int, int] = {}  # GPU id -> running job
    held: dict[int, list[int]] = {}  # running job -> its GPU ids
    running: list[tuple[float, int]] = []  # (end, job id)
    pending: dict[int, JobRequest] = {}
    promises: dict[int, float] = {}  # the bound each queued job was last given, passed back (as live)
    pending_of: dict[str, dict[int, None]] = {}
    history: dict[str, list[float]] = {}
    dirty: set[str] = set()
    ledger = UsageLedger(config.fairshare_half_life_s)
    for name, gpu_seconds in (usage or {}).items():
        ledger.add(name, gpu_seconds, arrivals[0].request.submitted_at if arrivals else 0.0)
    result = ReplayResult()
    started, ended, first, latest_min = result.started, result.ended, result.first_estimate, result.latest_min
    cycle_s = result.cycle_s
    staged: dict[int, float] = {}  # running job -> its staging seconds
    if staging is not None:
        staging.attach(views)

    def set_slots(gids: list[int], free_at: float, expected: float | None, since: float | None) -> None:
        for gid in gids:
            view, index = where[gid]
            if free_at == 0.0:
                view.gpus[index] = free_slot[gid]
            else:
                g = free_slot[gid]
                view.gpus[index] = GpuSlot(gid, g.model, g.memory_mib, free_at, expected, since)

    def run_s(jid: int) -> float:
        j = by_id[jid]
        return max(0.0, min(j.runtime_s, float(j.request.time_limit_s)))

    def complete(now: float) -> None:
        while running and running[0][0] <= now:
            end, jid = heapq.heappop(running)
            gids = held.pop(jid)
            for gid in gids:
                del holder[gid]
            set_slots(gids, 0.0, None, None)
            ran = end - started[jid]
            ended[jid] = end
            account = by_id[jid].request.account
            history[account] = remember_run(history.get(account, ()), ran - staged.pop(jid, 0.0))
            dirty.add(account)
            ledger.add(job_usage_key(by_id[jid].request), len(gids) * ran, end)

    def predicted(request: JobRequest) -> float | None:
        return predict_runtime(history.get(request.account, ()), request.time_limit_s) if predict else None

    def start(jid: int, placement_nodes, now: float) -> None:
        req = pending.pop(jid, None)
        if req is None:
            raise RuntimeError(f"the core placed job {jid}, which is not queued")
        del pending_of[req.account][jid]
        promises.pop(jid, None)
        gids = []
        for node_id, gpu_ids in placement_nodes:
            for gid in gpu_ids:
                if gid not in where or where[gid][0].node_id != node_id or gid in holder:
                    raise RuntimeError(f"job {jid}: GPU {gid} on node {node_id} is not free or not there")
                holder[gid] = jid
                gids.append(gid)
        if len(placement_nodes) != req.nodes or len(gids) != req.nodes * req.gpus_per_node:
            raise RuntimeError(f"job {jid} asked {req.nodes} x {req.gpus_per_node} GPUs, got {placement_nodes}")
        held[jid] = gids
        extra = staged[jid] = staging.on_start(req, placement_nodes, now) if staging is not None else 0.0
        set_slots(gids, *held_until(now, req.time_limit_s + extra,
                                    None if req.predicted_runtime_s is None else req.predicted_runtime_s + extra, now))
        heapq.heappush(running, (now + extra + run_s(jid), jid))
        started[jid] = now
        first.setdefault(jid, now)

    i, n = 0, len(arrivals)
    inf = float("inf")
    core_s = 0.0
    while i < n or running:
        now = min(arrivals[i].request.submitted_at if i < n else inf, running[0][0] if running else inf)
        if until is not None and now > until:
            break
        complete(now)
        fresh = []
        while i < n and arrivals[i].request.submitted_at <= now:
            request = arrivals[i].request
            pending[request.job_id] = replace(request, predicted_runtime_s=predicted(request))
            pending_of.setdefault(request.account, {})[request.job_id] = None
            fresh.append(request.job_id)
            i += 1
        if predict:
            for account in dirty:
                for jid in pending_of.get(account, ()):
                    pending[jid] = replace(pending[jid], predicted_runtime_s=predicted(pending[jid]))
        dirty.clear()
        if not pending:
            continue
        kwargs = {"usage": ledger.snapshot(now)} if pass_usage else {}
        if fair is not None:
            kwargs["fair"] = fair
        if staging is not None:
            staging.before_cycle(now)
        if pass_promises:
            kwargs["promises"] = promises
        t = time.perf_counter()
        decision = schedule_fn(list(pending.values()), views, now, config, **kwargs)
        dt = time.perf_counter() - t
        core_s += dt
        cycle_s.append(dt)
        result.cycles += 1
        for placement in decision.placements:
            start(placement.job_id, placement.nodes, now)
        if staging is not None:
            staging.after_cycle(decision, pending, views, now)
        if fresh:
            fresh_set = set(fresh)
            for pend in decision.pending:
                if pend.job_id in fresh_set:
                    first[pend.job_id] = pend.estimated_start
        for pend in decision.pending:
            bound = pend.latest_start
            if bound is not None:
                promises[pend.job_id] = bound
                if bound < latest_min.get(pend.job_id, inf):
                    latest_min[pend.job_id] = bound
        # A run of 0 s ends at ``now``: the next turn of the loop finds its end at this same
        # instant, frees its GPUs and runs another pass, as an event-driven EASY does.
        if progress is not None and result.cycles % 500 == 0:
            progress(i, n)
        if i >= n and not running:
            break  # what is left can never start
    if progress is not None:
        progress(i, n)
    result.core_s = core_s
    return result


@dataclass
class Replay:
    """What a replay produced: one outcome per job, and each cycle's wall time."""

    outcomes: list[JobOutcome]
    cycle_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    core_s: float = 0.0


def sim_nodes(nodes: int, gpus_per_node: int) -> list[NodeView]:
    """``nodes`` identical nodes ``sim0001``... of ``gpus_per_node`` GPUs; GPU ids 0, 1, ... in node order."""
    G = gpus_per_node
    return [NodeView(i + 1, f"sim{i + 1:04d}", "up",
                     [GpuSlot(gid, GPU_MODEL, GPU_MEMORY_MIB) for gid in range(i * G, (i + 1) * G)])
            for i in range(nodes)]


def trace_request(tj: TraceJob) -> JobRequest:
    """The scheduler's view of a trace job (no prediction yet: the replay gives it), by the live
    cycle's builder."""
    return job_request(tj, job_id=tj.job_id, account=tj.account, submitted_at_s=tj.submit, project=tj.project)


def replay(jobs: Sequence[TraceJob], nodes: int, gpus_per_node: int, policy: str | PolicyConfig = "fifo", *,
           schedule_fn: Callable | None = None, progress: Callable[[int, int], None] | None = None,
           staging: StagingHooks | None = None) -> Replay:
    """Replay trace ``jobs`` (ids unique) on ``nodes`` nodes of ``gpus_per_node`` GPUs through
    :func:`replay_jobs`; one :class:`~.metrics.JobOutcome` per job.

    Raises:
        ValueError: duplicate job ids, or a job larger than the pool.
        RuntimeError: the core placed a job that is not queued, or on GPUs that are not free.
    """
    wall = time.perf_counter()
    for j in jobs:
        if j.nodes > nodes or j.gpus_per_node > gpus_per_node:
            raise ValueError(f"job {j.job_id} needs {j.nodes} x {j.gpus_per_node} GPUs; "
                             f"the pool is {nodes} x {gpus_per_node}")
    requests = [trace_request(j) for j in jobs]
    if staging is not None:
        requests = staging.requests(requests)
    run = replay_jobs([ReplayJob(r, j.run_s) for r, j in zip(requests, jobs, strict=True)],
                      sim_nodes(nodes, gpus_per_node), policy, schedule_fn=schedule_fn, progress=progress,
                      staging=staging)
    outcomes = []
    for j in jobs:
        out = JobOutcome(j.job_id, j.account, j.submit, j.gpus, j.gpus_held, j.run_s, project=j.project)
        out.start = run.started.get(j.job_id)
        if j.job_id in run.first_estimate:
            out.first_estimate, out.estimated = run.first_estimate[j.job_id], True
        out.latest_min = run.latest_min.get(j.job_id)
        outcomes.append(out)
    return Replay(outcomes, run.cycle_s, time.perf_counter() - wall, run.core_s)
