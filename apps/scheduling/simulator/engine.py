"""The replay loop: a simulated clock driving the scheduling core, one cycle per event time.

Events are job arrivals (submit times) and completions (start + run). At each
distinct event time the loop applies the completions, then the arrivals,
then calls :func:`apps.scheduling.core.schedule` once and starts everything it
places; a job's start is that event time. A job that ends at the time it
starts (run 0) is an event at that same time: its GPUs come back and another
pass runs at the same instant (issue 14; classic event-driven EASY).

What the core sees mirrors the live site (:mod:`apps.scheduling.adapter`):

- every queued job, with ``predicted_runtime_s`` = the mean of its account's
  last two actual run times, capped by its time limit (at least 1 s), None
  without history (Tsafrir, Etsion, Feitelson, IEEE TPDS 2007), refreshed
  whenever the account's history changes;
- the nodes, with each held GPU's ``free_at`` = start + time limit and
  ``expected_free_at`` = start + prediction; a run past its prediction is
  expected to take as long again as it has so far, never past its limit
  (here re-set when the expectation passes, the live site re-sets it every cycle);
- ``usage`` = the decayed GPU-seconds of each queued account that has any:
  GPUs x run time added when a job ends, halved every half-life of simulated time.

The simulator keeps its own state incrementally: running jobs in a heap by
end time, node views changed in place only where a job starts or ends.
"""
from __future__ import annotations

import heapq
import inspect
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from apps.scheduling.core import GpuSlot, JobRequest, NodeView, PolicyConfig, decay, schedule

from .metrics import JobOutcome
from .swf import TraceJob

HALF_LIFE_S = 7 * 86400.0
RECENT_RUNS = 2
GPU_MODEL = "SIM-GPU"
GPU_MEMORY_MIB = 81920

def predict_runtime(recent_runs_s: Sequence[float], time_limit_s: int) -> float | None:
    """Mean of the last two run times, capped by the time limit, at least 1 s; None without history."""
    recent = list(recent_runs_s)[-RECENT_RUNS:]
    if not recent:
        return None
    return min(float(time_limit_s), max(1.0, sum(recent) / len(recent)))


def expected_end(start: float, predicted_s: float | None, time_limit_s: float, now: float) -> float | None:
    """When a run should end by its prediction; past it, as long again as it has run (capped by the limit)."""
    if predicted_s is None:
        return None
    limit = start + time_limit_s
    end = start + predicted_s
    if end <= now:
        end = start + 2 * (now - start)
    return max(now + 1, min(end, limit))


class UsageBook:
    """Decayed GPU-seconds per account, updated on each job end (SPEC §5 fair share)."""

    def __init__(self, half_life_s: float = HALF_LIFE_S):
        self.half_life_s = half_life_s
        self._value: dict[str, float] = {}
        self._at: dict[str, float] = {}

    def add(self, account: str, gpu_seconds: float, now: float) -> None:
        self._value[account] = self.get(account, now) + max(0.0, gpu_seconds)
        self._at[account] = max(now, self._at.get(account, now))

    def get(self, account: str, now: float) -> float:
        if account not in self._value:
            return 0.0
        return decay(self._value[account], now - self._at[account], self.half_life_s)

    def snapshot(self, now: float, accounts: Iterable[str] | None = None) -> dict[str, float]:
        """``{account: decayed GPU-seconds at now}`` for ``accounts`` that have any (None: all)."""
        value, at, hl = self._value, self._at, self.half_life_s
        names = value if accounts is None else [a for a in accounts if a in value]
        return {a: decay(value[a], now - at[a], hl) for a in names}

    def __contains__(self, account: str) -> bool:
        return account in self._value


@dataclass
class Replay:
    """What a replay produced: one outcome per job, and each cycle's wall time."""

    outcomes: list[JobOutcome]
    cycle_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    core_s: float = 0.0


def _accepts_usage(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "usage" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def replay(jobs: Sequence[TraceJob], nodes: int, gpus_per_node: int, policy: str | PolicyConfig = "fifo", *,
           half_life_s: float = HALF_LIFE_S, usage_scope: str = "queued", schedule_fn: Callable | None = None,
           progress: Callable[[int, int], None] | None = None) -> Replay:
    """Replay ``jobs`` (sorted by submit time, ids unique) on ``nodes`` nodes of ``gpus_per_node`` GPUs.

    ``usage_scope``: ``"queued"`` passes the usage of the queued accounts
    only, as the live site does; ``"all"`` that of every account with any.

    Raises:
        ValueError: duplicate job ids, or a job larger than the pool.
        RuntimeError: the core placed a job that is not queued, or on GPUs that are not free.
    """
    schedule_fn = schedule_fn or schedule
    pass_usage = _accepts_usage(schedule_fn)
    wall = time.perf_counter()
    G = gpus_per_node
    by_id: dict[int, TraceJob] = {}
    for j in jobs:
        if j.job_id in by_id:
            raise ValueError(f"duplicate job id {j.job_id}")
        if j.nodes > nodes or j.gpus_per_node > G:
            raise ValueError(f"job {j.job_id} needs {j.nodes} x {j.gpus_per_node} GPUs; the pool is {nodes} x {G}")
        by_id[j.job_id] = j
    outcomes = {j.job_id: JobOutcome(j.job_id, j.account, j.submit, j.gpus, j.gpus_held, j.run_s) for j in jobs}

    free_slot = [GpuSlot(gid, GPU_MODEL, GPU_MEMORY_MIB, 0.0, None) for gid in range(nodes * G)]
    views = [NodeView(i + 1, f"sim{i + 1:04d}", "up", free_slot[i * G:(i + 1) * G]) for i in range(nodes)]
    holder: list[int | None] = [None] * (nodes * G)
    held: dict[int, list[int]] = {}  # running job -> its GPU ids
    started: dict[int, tuple[float, float | None]] = {}  # running job -> (start, prediction)
    running: list[tuple[float, int]] = []  # (end, job id)
    expecting: list[tuple[float, int]] = []  # (expected end, job id) for runs expected before their limit

    pending: dict[int, JobRequest] = {}
    pending_of: dict[str, dict[int, None]] = {}
    queued_accounts: Counter[str] = Counter()
    history: dict[str, deque[float]] = {}
    dirty: set[str] = set()
    usage = UsageBook(half_life_s)
    result = Replay(list(outcomes.values()))
    cycle_s = result.cycle_s

    def set_slots(gids: list[int], free_at: float, expected: float | None) -> None:
        for gid in gids:
            slot = free_slot[gid] if free_at == 0.0 else GpuSlot(gid, GPU_MODEL, GPU_MEMORY_MIB, free_at, expected)
            views[gid // G].gpus[gid % G] = slot

    def complete(now: float) -> None:
        while running and running[0][0] <= now:
            end, jid = heapq.heappop(running)
            gids = held.pop(jid)
            started.pop(jid)
            for gid in gids:
                holder[gid] = None
            set_slots(gids, 0.0, None)
            tj = by_id[jid]
            history.setdefault(tj.account, deque(maxlen=RECENT_RUNS)).append(tj.run_s)
            dirty.add(tj.account)
            usage.add(tj.account, tj.gpus_held * tj.run_s, end)

    def re_expect(now: float) -> None:
        while expecting and expecting[0][0] <= now:
            _, jid = heapq.heappop(expecting)
            if jid not in started:
                continue
            start, predicted = started[jid]
            tj = by_id[jid]
            exp = expected_end(start, predicted, tj.time_limit_s, now)
            set_slots(held[jid], start + tj.time_limit_s, exp)
            if exp is not None and exp < start + tj.time_limit_s:
                heapq.heappush(expecting, (exp, jid))

    def request(tj: TraceJob) -> JobRequest:
        recent = history.get(tj.account)
        return JobRequest(job_id=tj.job_id, account=tj.account, submitted_at=tj.submit,
                          gpus_per_node=tj.gpus_per_node, nodes=tj.nodes, time_limit_s=tj.time_limit_s,
                          predicted_runtime_s=predict_runtime(recent, tj.time_limit_s) if recent else None)

    def start(jid: int, placement_nodes, now: float) -> None:
        req = pending.pop(jid, None)
        if req is None:
            raise RuntimeError(f"the core placed job {jid}, which is not queued")
        tj = by_id[jid]
        del pending_of[tj.account][jid]
        queued_accounts[tj.account] -= 1
        if not queued_accounts[tj.account]:
            del queued_accounts[tj.account]
        gids = []
        for node_id, gpu_ids in placement_nodes:
            for gid in gpu_ids:
                if gid // G != node_id - 1 or holder[gid] is not None:
                    raise RuntimeError(f"job {jid}: GPU {gid} on node {node_id} is not free or not there")
                holder[gid] = jid
                gids.append(gid)
        if len(placement_nodes) != tj.nodes or len(gids) != tj.gpus_held:
            raise RuntimeError(f"job {jid} asked {tj.nodes} x {tj.gpus_per_node} GPUs, got {placement_nodes}")
        held[jid] = gids
        started[jid] = (now, req.predicted_runtime_s)
        exp = expected_end(now, req.predicted_runtime_s, tj.time_limit_s, now)
        set_slots(gids, now + tj.time_limit_s, exp)
        if exp is not None and exp < now + tj.time_limit_s:
            heapq.heappush(expecting, (exp, jid))
        heapq.heappush(running, (now + tj.run_s, jid))
        out = outcomes[jid]
        out.start = now
        if not out.estimated:
            out.first_estimate, out.estimated = now, True

    i, n = 0, len(jobs)
    core_s = 0.0
    cycles = 0
    while i < n or running:
        now = min(jobs[i].submit if i < n else float("inf"), running[0][0] if running else float("inf"))
        complete(now)
        re_expect(now)
        fresh = []
        while i < n and jobs[i].submit <= now:
            tj = jobs[i]
            pending[tj.job_id] = request(tj)
            pending_of.setdefault(tj.account, {})[tj.job_id] = None
            queued_accounts[tj.account] += 1
            fresh.append(tj.job_id)
            i += 1
        for account in dirty:
            for jid in pending_of.get(account, ()):
                pending[jid] = replace(pending[jid], predicted_runtime_s=predict_runtime(
                    history[account], by_id[jid].time_limit_s))
        dirty.clear()
        kwargs = {}
        if pass_usage:
            kwargs["usage"] = usage.snapshot(now, queued_accounts if usage_scope == "queued" else None)
        queue = list(pending.values())
        t = time.perf_counter()
        decision = schedule_fn(queue, views, now, policy, **kwargs)
        dt = time.perf_counter() - t
        core_s += dt
        cycle_s.append(dt)
        cycles += 1
        for placement in decision.placements:
            start(placement.job_id, placement.nodes, now)
        if fresh:
            fresh_set = set(fresh)
            for pend in decision.pending:
                if pend.job_id in fresh_set:
                    out = outcomes[pend.job_id]
                    out.first_estimate, out.estimated = pend.estimated_start, True
        # A run of 0 s ends at ``now``: the next turn of the loop finds its end at this same
        # instant, frees its GPUs and runs another pass, as an event-driven EASY does.
        if progress is not None and cycles % 500 == 0:
            progress(i, n)
        if i >= n and not running and pending:
            break  # what is left can never start
    if progress is not None:
        progress(i, n)
    result.core_s = core_s
    result.wall_s = time.perf_counter() - wall
    return result
