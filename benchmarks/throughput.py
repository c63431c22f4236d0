"""Trivial one-GPU jobs per second through one simulated 8-GPU node
(goal >= 20/s; Slurm 22.05: 3.3 stock, 9.5 tuned).

N jobs running ``true`` are submitted at once; the figure is N divided by the
time from the first submit to the last release, each job having gone through
all five steps (rent, agent accept, run, exit, release; no outputs declared,
so no bundle). Baseline in the same run: the same N ``/bin/sh -c true``
processes started one after another straight from Python, the floor of
running them at all.

    .venv/bin/python benchmarks/throughput.py [--jobs 200] [--json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from datetime import datetime

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
    return {"released": len(done), "succeeded": sum(j["outcome"] == "succeeded" for j in done), "jobs_per_s": rate}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    t = time.perf_counter()
    for _ in range(args.jobs):
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
    baseline = args.jobs / (time.perf_counter() - t)
    with live_stack([("bench-node", "8xH100-80GB")]) as (stack, token):
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=60)
        drained = drain_rate(client, args.jobs)
    rate = drained["jobs_per_s"]
    result = {"benchmark": "throughput", "jobs": args.jobs, "released": drained["released"],
              "succeeded": drained["succeeded"],
              "jobs_per_s": round(rate, 2), "baseline_sh_true_per_s": round(baseline, 1),
              "ratio_to_baseline": round(rate / baseline, 4), "goal_per_s": 20, "slurm_per_s": [3.3, 9.5]}
    print(json.dumps(result) if args.json else
          f"trivial 1-GPU jobs through one 8-GPU node: {rate:.1f} jobs/s ({drained['released']}/{args.jobs} released, "
          f"{result['succeeded']} succeeded); bare /bin/sh -c true: {baseline:.0f}/s; goal >= 20, Slurm 3.3-9.5")
    return result


if __name__ == "__main__":
    main()
