"""Trivial one-GPU jobs per second through one simulated 8-GPU node
(goal >= 20/s; Slurm 22.05: 3.3 stock, 9.5 tuned).

N jobs running ``true`` are submitted at once; the figure is N divided by the
time from the first submit to the last release, each job having gone through
all five steps (rent, agent accept, run, exit, release; no outputs declared,
so no bundle). Baseline in the same run: the same N ``/bin/sh -c true``
processes started one after another straight from Python, the floor of
running them at all.

HTTP calls per job: the agent's calls (``/api/v1/agent/...``) counted from the
web process's access log (uvicorn's, kept for this run: ``E31_WEB_ACCESS_LOG=1``) between the
first submit and the last release, by kind, divided by N. Heartbeats and the
idle long polls are counted too: they are what a job costs the server.

    .venv/bin/python benchmarks/throughput.py [--jobs 200] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
from _stack import live_stack, trivial_spec


def drain_rate(client: httpx.Client, jobs: int, timeout: float = 600, prefix: str = "tp") -> dict:
    """Submit ``jobs`` trivial jobs at once and wait until all are released (or ``timeout`` s).

    Returns ``released``, ``succeeded`` and ``jobs_per_s``: released jobs divided by
    the seconds from the first ``submitted_at`` to the last ``released_at`` (server stamps).
    """
    before = client.get("/api/v1/jobs/?state=released").json()["count"]
    ids = [client.post("/api/v1/jobs/", json=trivial_spec(f"{prefix}-{i}")).json()["id"] for i in range(jobs)]
    deadline = time.monotonic() + timeout
    while True:
        page = client.get("/api/v1/jobs/?state=released").json()
        if page["count"] >= before + len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    found = [client.get(f"/api/v1/jobs/{i}/").json() for i in ids]
    done = [j for j in found if j["state"] == "released"]
    first = min(datetime.fromisoformat(j["submitted_at"]) for j in found)
    rate = len(done) / (max(datetime.fromisoformat(j["released_at"]) for j in done) - first).total_seconds() \
        if done else 0.0
    return {"released": len(done), "succeeded": sum(j["outcome"] == "succeeded" for j in done), "jobs_per_s": rate,
            "jobs": found}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    t = time.perf_counter()
    for _ in range(args.jobs):
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
    baseline = args.jobs / (time.perf_counter() - t)
    os.environ["E31_WEB_ACCESS_LOG"] = "1"  # the agent's calls are counted from it
    with live_stack([("bench-node", "8xH100-80GB")]) as (stack, token):
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=60)
        access_log = Path(stack.var_dir) / "web0.log"
        log_start = access_log.stat().st_size
        drained = drain_rate(client, args.jobs)
        calls = agent_calls(access_log, log_start)
    done = [j for j in drained["jobs"] if j["state"] == "released"]
    rate = drained["jobs_per_s"]
    per_job = sum(calls.values()) / args.jobs

    def median_s(start: str, end: str) -> float:
        return round(statistics.median((datetime.fromisoformat(j[end]) - datetime.fromisoformat(j[start]))
                                       .total_seconds() for j in done), 3)

    # where a job's time goes on the server's clock: rent -> command started (the assignment reaches
    # the agent, it starts the command, its report lands), start -> end, end -> GPUs released
    steps = {"rent_to_running_s": median_s("rented_at", "run_started_at"),
             "running_to_exited_s": median_s("run_started_at", "run_ended_at"),
             "exited_to_released_s": median_s("run_ended_at", "released_at")}
    result = {"benchmark": "throughput", "jobs": args.jobs, "released": len(done),
              "succeeded": sum(j["outcome"] == "succeeded" for j in done),
              "jobs_per_s": round(rate, 2), "agent_http_calls_per_job": round(per_job, 2),
              "agent_http_calls": dict(sorted(calls.items())), "median_steps": steps,
              "baseline_sh_true_per_s": round(baseline, 1),
              "ratio_to_baseline": round(rate / baseline, 4), "goal_per_s": 20, "slurm_per_s": [3.3, 9.5]}
    print(json.dumps(result) if args.json else
          f"trivial 1-GPU jobs through one 8-GPU node: {rate:.1f} jobs/s ({len(done)}/{args.jobs} released, "
          f"{result['succeeded']} succeeded); bare /bin/sh -c true: {baseline:.0f}/s; goal >= 20, Slurm 3.3-9.5\n"
          f"agent HTTP calls per job: {per_job:.2f} ("
          + ", ".join(f"{k} {v / args.jobs:.2f}" for k, v in sorted(calls.items())) + ")\n"
          "median steps (server clock): " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    return result


_AGENT_CALL = re.compile(r'"(?:GET|POST|PUT) /api/v1/agent/([a-z]+)/?(?:\d+/)?([a-z]*)')


def agent_calls(access_log: Path, start: int) -> Counter:
    """The agent's calls in the web process's access log from byte ``start``, by kind (``work``,
    ``heartbeat``, ``jobs/report``, ``jobs/log``, ``reports``...)."""
    counts: Counter = Counter()
    with open(access_log, "rb") as fh:
        fh.seek(start)
        for line in fh.read().decode(errors="replace").splitlines():
            match = _AGENT_CALL.search(line)
            if match:
                counts["/".join(p for p in match.groups() if p)] += 1
    return counts


if __name__ == "__main__":
    main()
