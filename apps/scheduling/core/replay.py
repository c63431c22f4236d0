"""A tiny discrete-event loop over :func:`schedule`, for tests and quick policy checks.

Not the trace simulator (``apps.scheduling.simulator``): no SWF parsing, no
metrics beyond start times. Each event time: completions first, then
arrivals, then one cycle (as EASY is defined). Jobs run their real run time,
stopped at their time limit; the next job of an account is predicted from
its last two real run times (:func:`~.priority.predict_runtime`); fair
share is charged GPU-seconds at completion (:class:`~.priority.UsageLedger`).
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .core import policy_config, schedule
from .priority import UsageLedger, predict_runtime
from .types import GpuSlot, JobRequest, NodeView, PolicyConfig


@dataclass(frozen=True)
class ReplayJob:
    """A job to replay: the request (``submitted_at`` = arrival) and how long it really runs (s)."""

    request: JobRequest
    runtime_s: float


@dataclass
class ReplayResult:
    """Per job id: start (epoch s), first estimate seen (start time if placed at once), end."""

    started: dict[int, float] = field(default_factory=dict)
    first_estimate: dict[int, float | None] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)
    cycles: int = 0


def replay(jobs: Sequence[ReplayJob], nodes: Sequence[NodeView], policy: str | PolicyConfig = "e31", *,
           until: float | None = None, predict: bool = True,
           usage: dict[str, float] | None = None) -> ReplayResult:
    """Run ``jobs`` on ``nodes`` (all GPUs free at the start) under ``policy``.

    ``usage``: GPU-seconds already charged per account at the first arrival.

    Stops when everything has run, when nothing can happen any more, or at ``until``.
    """
    config = policy_config(policy)
    arrivals = sorted(jobs, key=lambda j: (j.request.submitted_at, j.request.job_id))
    runtime = {j.request.job_id: j.runtime_s for j in jobs}
    account = {j.request.job_id: j.request.account for j in jobs}
    held: dict[int, tuple[float, float]] = {}      # gpu id -> (free_at, expected_free_at)
    owner: dict[int, list[int]] = {}                # job id -> its GPU ids
    running: list[tuple[float, int]] = []           # (end, job id)
    history: dict[str, list[float]] = defaultdict(list)
    ledger = UsageLedger(config.fairshare_half_life_s)
    for name, gpu_seconds in (usage or {}).items():
        ledger.add(name, gpu_seconds, arrivals[0].request.submitted_at if arrivals else 0.0)
    queue: dict[int, JobRequest] = {}
    result = ReplayResult()
    i = 0
    while i < len(arrivals) or running:
        t = min(arrivals[i].request.submitted_at if i < len(arrivals) else float("inf"),
                running[0][0] if running else float("inf"))
        if until is not None and t > until:
            break
        while running and running[0][0] <= t:
            _end, job_id = heapq.heappop(running)
            gpus = owner.pop(job_id)
            for g in gpus:
                held.pop(g, None)
            ran = t - result.started[job_id]
            result.ended[job_id] = t
            history[account[job_id]].append(ran)
            ledger.add(account[job_id], ran * len(gpus), t)
        while i < len(arrivals) and arrivals[i].request.submitted_at <= t:
            request = arrivals[i].request
            if predict:
                request = replace(request, predicted_runtime_s=predict_runtime(history[request.account],
                                                                               request.time_limit_s))
            queue[request.job_id] = request
            i += 1
        if not queue:
            continue
        views = [_view(n, held) for n in nodes]
        decision = schedule(list(queue.values()), views, t, config, ledger.snapshot(t))
        result.cycles += 1
        for placement in decision.placements:
            request = queue.pop(placement.job_id)
            result.started[request.job_id] = t
            result.first_estimate.setdefault(request.job_id, t)
            planned = request.predicted_runtime_s or request.time_limit_s
            gpu_ids = [g for _n, ids in placement.nodes for g in ids]
            for g in gpu_ids:
                held[g] = (t + request.time_limit_s, t + min(planned, request.time_limit_s))
            owner[request.job_id] = gpu_ids
            heapq.heappush(running, (t + min(runtime[request.job_id], request.time_limit_s), request.job_id))
        for pending in decision.pending:
            result.first_estimate.setdefault(pending.job_id, pending.estimated_start)
        if not running and i >= len(arrivals):
            break  # what is left can never start
    return result


def _view(node: NodeView, held: dict[int, tuple[float, float]]) -> NodeView:
    gpus = [GpuSlot(g.gpu_id, g.model, g.memory_mib, *held.get(g.gpu_id, (0.0, None))) for g in node.gpus]
    return NodeView(node.node_id, node.name, node.state, gpus, node.cpus_free, node.memory_free_mib,
                    node.cpus_total, node.memory_total_mib, node.runtimes)
