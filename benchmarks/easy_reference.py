"""An independent EASY backfilling replay of an SWF trace, to check ``manage.py simulate --policy easy``.

Written apart from ``apps.scheduling`` (it imports nothing of it): its own SWF
reading, its own pool (a free-GPU count per node) and its own event loop, so
that a mistake in the product's replay or core shows up as a difference in
the figures (issue 14, item 2: the two must agree to 0.1 % of mean bounded
slowdown on every trace).

EASY (Lifka, JSSPP 1995; Mu'alem and Feitelson, IEEE TPDS 12(6) 2001, fig. 1),
on nodes of ``G`` GPUs with gang placement as the product defines it:

- a job of ``n <= G`` GPUs takes ``n`` GPUs of one node, a larger one
  ``ceil(n / G)`` whole nodes; ``n`` = requested processors (SWF field 8),
  allocated (field 5) only where the request is unknown; time limit = field 9
  (else the run time, at least 1 s); run = field 4 cut at the limit;
- at each event time (completions, then arrivals) one pass in submit order:
  jobs start while they fit (best fit: the nodes with the fewest free GPUs
  that hold a rank, ties to reserved nodes, then node order); the first that
  does not fit gets a reservation at the shadow time (the earliest time, by
  the running jobs' *time limits*, at which enough nodes hold a rank; nodes
  picked best fit at that time, ties to fewer GPUs free now); a later job may
  start on a reserved node only if, by its time limit, it ends by the shadow
  time or fits in that node's GPUs left over at the shadow time ("extra");
- a job that runs 0 s ends at the instant it starts: that is an event, and
  another pass runs at the same time.

    .venv/bin/python benchmarks/easy_reference.py /work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz \
        --nodes 100 --gpus-per-node 1 --limit 20000 --compare
"""
from __future__ import annotations

import argparse
import gzip
import heapq
import json
import math
import sys
import time
from pathlib import Path


def read_jobs(path: str | Path, gpus_per_node: int, nodes: int, limit: int | None = None) -> list[dict]:
    """Replayable jobs of an SWF file (gzip or plain), sorted by (submit, id), the first ``limit``.

    Each job: ``{"id", "user", "submit", "gpus", "per_node", "nodes", "limit", "run"}`` (seconds).
    Skips run < 0, no processors, and jobs larger than the pool.
    """
    opener = gzip.open if Path(path).read_bytes()[:2] == b"\x1f\x8b" else open
    rows = []
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            f = line.split()
            if not f or f[0].startswith(";") or len(f) < 12:
                continue
            v = [int(float(x)) for x in f[:12]]
            rows.append(v)
    rows.sort(key=lambda v: (v[1], v[0]))
    jobs = []
    for v in rows:
        if limit is not None and len(jobs) >= limit:
            break
        run, procs = v[3], (v[7] if v[7] > 0 else v[4])
        if run < 0 or procs <= 0:
            continue
        per_node, count = (procs, 1) if procs <= gpus_per_node else (gpus_per_node, math.ceil(procs / gpus_per_node))
        if count > nodes:
            continue
        lim = max(1, v[8] if v[8] > 0 else run)
        jobs.append({"id": v[0], "user": v[11], "submit": v[1], "gpus": procs, "per_node": per_node,
                     "nodes": count, "limit": lim, "run": min(run, lim)})
    return jobs


def easy(jobs: list[dict], nodes: int, gpus_per_node: int) -> dict[int, float]:
    """Start time of every job under EASY (see the module docstring); ``{job id: start s}``."""
    free = [gpus_per_node] * nodes
    holding: list[list[tuple[float, int]]] = [[] for _ in range(nodes)]  # per node: (end by limit, GPUs)
    running: list[tuple[float, int, int]] = []  # (real end, job index, seq)
    placed: dict[int, list[int]] = {}
    queue: list[int] = []
    starts: dict[int, float] = {}
    i, n = 0, len(jobs)
    while i < n or running or queue:
        t = min(jobs[i]["submit"] if i < n else math.inf, running[0][0] if running else math.inf)
        if t == math.inf:
            break
        while running and running[0][0] <= t:
            _end, j, _ = heapq.heappop(running)
            k = jobs[j]["per_node"]
            for node in placed.pop(j):
                free[node] += k
                holding[node].remove((starts[jobs[j]["id"]] + jobs[j]["limit"], k))
        while i < n and jobs[i]["submit"] <= t:
            queue.append(i)
            i += 1
        queue = _pass(jobs, queue, t, free, holding, running, placed, starts, nodes)
    return starts


def _pass(jobs, queue, t, free, holding, running, placed, starts, nodes) -> list[int]:
    """One EASY pass at time ``t``; returns the jobs still queued."""
    shadow = None
    extra: dict[int, int] = {}  # reserved node -> GPUs left over at the shadow time
    left = []
    total_free = sum(free)
    for j in queue:
        job = jobs[j]
        k, m, lim = job["per_node"], job["nodes"], job["limit"]
        if total_free < k * m:
            chosen = None
        else:
            cands = [(free[x], x not in extra, x) for x in range(nodes) if free[x] >= k]
            cands.sort()
            chosen = []
            for _f, _notres, x in cands:
                if shadow is not None and x in extra and t + lim > shadow and k > extra[x]:
                    continue
                chosen.append(x)
                if len(chosen) == m:
                    break
            if len(chosen) < m:
                chosen = None
        if chosen is not None:
            for x in chosen:
                free[x] -= k
                holding[x].append((t + lim, k))
                if shadow is not None and x in extra and t + lim > shadow:
                    extra[x] -= k
            total_free -= k * m
            placed[j] = chosen
            starts[job["id"]] = t
            heapq.heappush(running, (t + job["run"], j, j))
            continue
        if shadow is None:
            shadow, extra = _reserve(job, t, free, holding, nodes)
        left.append(j)
    return left


def _reserve(job, t, free, holding, nodes) -> tuple[float, dict[int, int]]:
    """The head's shadow time and its nodes' GPUs left over then: ``(shadow, {node: extra})``."""
    k, m = job["per_node"], job["nodes"]
    ready = []  # (time the node first has k GPUs free by limits, node)
    for x in range(nodes):
        have = free[x]
        if have >= k:
            ready.append((t, x))
            continue
        for end, count in sorted(holding[x]):
            have += count
            if have >= k:
                ready.append((max(end, t), x))
                break
    ready.sort()
    shadow = ready[m - 1][0]

    def free_at(x: int, when: float) -> int:
        return free[x] + sum(c for end, c in holding[x] if end <= when)

    ranked = sorted((free_at(x, shadow) - k, free[x], x) for r, x in ready if r <= shadow)
    return shadow, {x: left for left, _f, x in ranked[:m]}


def bsld_mean(jobs: list[dict], starts: dict[int, float]) -> tuple[float, float]:
    """Mean bounded slowdown (tau 10 s) and mean wait (s) of the started jobs."""
    bs, waits = [], []
    for job in jobs:
        if job["id"] not in starts:
            continue
        wait = starts[job["id"]] - job["submit"]
        waits.append(wait)
        bs.append(max(1.0, (wait + job["run"]) / max(job["run"], 10)))
    return sum(bs) / len(bs), sum(waits) / len(waits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--limit", type=int, default=20000)
    parser.add_argument("--compare", action="store_true",
                        help="also replay with the product's simulator (--policy easy) and compare")
    a = parser.parse_args(argv)
    wall = time.perf_counter()
    jobs = read_jobs(a.trace, a.gpus_per_node, a.nodes, a.limit or None)
    starts = easy(jobs, a.nodes, a.gpus_per_node)
    bsld, wait = bsld_mean(jobs, starts)
    out = {"trace": Path(a.trace).name, "jobs": len(jobs), "reference_bsld": round(bsld, 4),
           "reference_wait_mean_s": round(wait, 1), "reference_wall_s": round(time.perf_counter() - wall, 1)}
    if a.compare:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from apps.scheduling.simulator import simulate_trace  # the product, only to compare with

        sim = simulate_trace(a.trace, "easy", nodes=a.nodes, gpus_per_node=a.gpus_per_node, limit=a.limit or None)
        out.update(simulator_bsld=sim["bsld_mean"], simulator_wait_mean_s=sim["wait_mean_s"],
                   relative_difference=round(abs(sim["bsld_mean"] - bsld) / bsld, 6),
                   within_0_1_percent=abs(sim["bsld_mean"] - bsld) <= 0.001 * bsld)
    print(json.dumps(out))
    return 0 if out.get("within_0_1_percent", True) else 1


if __name__ == "__main__":
    sys.exit(main())
