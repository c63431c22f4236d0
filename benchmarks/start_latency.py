"""Submit-to-running latency on an idle pool (goal: median <= 0.2 s, p95 <= 0.5 s;
Slurm 22.05: median 0.4 s, 0.9-1.9 s back to back).

Both ends are stamped by the server's clock: ``run_started_at - submitted_at``,
where running is the agent's report that the command started. Two runs: one
job at a time on an idle node (each released before the next is sent), and
bursts of 8 jobs sent back to back to the 8-GPU node. Baseline in the same
run: the median round trip of a trivial authenticated read.

    .venv/bin/python benchmarks/start_latency.py [--jobs 40] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime

import httpx
from _stack import live_stack, percentile, trivial_spec


def _seconds(job: dict) -> float:
    return (datetime.fromisoformat(job["run_started_at"]) - datetime.fromisoformat(job["submitted_at"])).total_seconds()


def _wait_released(client: httpx.Client, ids: list[int], timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [client.get(f"/api/v1/jobs/{i}/").json() for i in ids]
        if all(j["state"] == "released" for j in jobs):
            return jobs
        if time.monotonic() > deadline:
            raise TimeoutError([j["state"] for j in jobs])
        time.sleep(0.05)


def read_rtt(client: httpx.Client, n: int = 50) -> list[float]:
    """Round trips (s) of ``n`` trivial authenticated reads (``GET /api/v1/pool/``)."""
    rtt = []
    for _ in range(n):
        t = time.perf_counter()
        client.get("/api/v1/pool/")
        rtt.append(time.perf_counter() - t)
    return rtt


def idle_latency(client: httpx.Client, jobs: int, prefix: str = "lat") -> list[float]:
    """Submit-to-running (s, server stamps) of ``jobs`` trivial jobs, one at a time on an idle pool.

    Each job is released before the next is sent.

    Raises:
        TimeoutError: a job was not released within 60 s.
    """
    single = []
    for i in range(jobs):
        job_id = client.post("/api/v1/jobs/", json=trivial_spec(f"{prefix}-{i}")).json()["id"]
        single.append(_seconds(_wait_released(client, [job_id])[0]))
    return single


def burst_latency(client: httpx.Client, bursts: int, size: int = 8) -> list[float]:
    """Submit-to-running (s) of ``bursts`` bursts of ``size`` jobs sent back to back."""
    burst = []
    for b in range(bursts):
        ids = [client.post("/api/v1/jobs/", json=trivial_spec(f"burst-{b}-{i}")).json()["id"] for i in range(size)]
        burst += [_seconds(j) for j in _wait_released(client, ids)]
    return burst


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with live_stack([("bench-node", "8xH100-80GB")]) as (stack, token):
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=30)
        rtt = read_rtt(client)
        single = idle_latency(client, args.jobs)
        burst = burst_latency(client, max(1, args.jobs // 8))
    result = {
        "benchmark": "start_latency", "jobs": len(single),
        "idle_median_s": round(statistics.median(single), 3), "idle_p95_s": round(percentile(single, 95), 3),
        "burst_jobs": len(burst), "burst_median_s": round(statistics.median(burst), 3),
        "burst_p95_s": round(percentile(burst, 95), 3),
        "baseline_read_rtt_median_s": round(statistics.median(rtt), 4),
        "ratio_idle_median_to_rtt": round(statistics.median(single) / statistics.median(rtt), 1),
        "goal_median_s": 0.2, "goal_p95_s": 0.5, "slurm_median_s": 0.4,
    }
    print(json.dumps(result) if args.json else
          f"submit-to-running, idle pool, {len(single)} jobs: median {result['idle_median_s']} s, "
          f"p95 {result['idle_p95_s']} s; back to back ({len(burst)} jobs in bursts of 8): median "
          f"{result['burst_median_s']} s, p95 {result['burst_p95_s']} s; trivial read round trip "
          f"{result['baseline_read_rtt_median_s'] * 1000:.1f} ms; goal median <= 0.2 s, p95 <= 0.5 s")
    return result


if __name__ == "__main__":
    main()
