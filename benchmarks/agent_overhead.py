"""The agent's own CPU while jobs run (issue 27 item 3; goal: under 0.5 % of a core idle and under
0.2 % of a core per running job). A live stack with one 8-GPU node; for 0, 1 and 8 running
``sleep`` jobs it measures, over ``--seconds``, the CPU seconds of the agent process and of the
jobs' shims (per minute and as % of one core), next to the same number of ``sleep``s run bare
(the baseline: what the jobs themselves cost).

    .venv/bin/python benchmarks/agent_overhead.py [--seconds 20] [--json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time

import httpx
import psutil
from _stack import live_stack, trivial_spec


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _shims(agent: psutil.Process) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "e31_agent.shim" in " ".join(p.info["cmdline"] or [])]


def measure(agent: psutil.Process, seconds: float) -> tuple[float, float]:
    """CPU seconds of the agent and of the shims over ``seconds``."""
    shims = _shims(agent)
    a0, s0 = _cpu([agent]), _cpu(shims)
    time.sleep(seconds)
    return _cpu([agent]) - a0, _cpu(shims) - s0


def bare(n: int, seconds: float) -> float:
    """CPU seconds of ``n`` bare ``sleep``s over ``seconds``."""
    procs = [subprocess.Popen(["sleep", str(seconds + 5)]) for _ in range(n)]
    ps = [psutil.Process(p.pid) for p in procs]
    time.sleep(0.2)
    c0 = _cpu(ps)
    time.sleep(seconds)
    used = _cpu(ps) - c0
    for p in procs:
        p.kill()
        p.wait()
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with live_stack([("node-a", "8xH100-80GB")]) as (stack, token):
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=30)
        agent = psutil.Process(stack.named["agent-node-a"].pid)
        time.sleep(3)  # registration and the first beats settle
        for n in (0, 1, 8):
            ids = []
            for _ in range(n):
                spec = trivial_spec(command=f"sleep {args.seconds + 30:.0f}")
                ids.append(client.post("/api/v1/jobs/", json=spec).json()["id"])
            deadline = time.monotonic() + 60
            while ids and time.monotonic() < deadline:
                states = [client.get(f"/api/v1/jobs/{i}/").json()["state"] for i in ids]
                if all(s == "running" for s in states):
                    break
                time.sleep(0.2)
            time.sleep(2)
            agent_s, shims_s = measure(agent, args.seconds)
            bare_s = bare(n, args.seconds) if n else 0.0
            rows.append({"jobs": n, "agent_cpu_pct": round(100 * agent_s / args.seconds, 3),
                         "agent_cpu_pct_per_job": round(100 * agent_s / args.seconds / n, 3) if n else None,
                         "shims_cpu_pct": round(100 * shims_s / args.seconds, 3),
                         "bare_sleeps_cpu_pct": round(100 * bare_s / args.seconds, 3),
                         "agent_cpu_s_per_min": round(60 * agent_s / args.seconds, 3)})
            for i in ids:
                client.post(f"/api/v1/jobs/{i}/cancel/")
            time.sleep(3)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'jobs':>4} {'agent %core':>12} {'per job':>8} {'shims %core':>12} {'bare sleeps':>12} {'agent s/min':>12}")
    for r in rows:
        per = f"{r['agent_cpu_pct_per_job']:.3f}" if r["agent_cpu_pct_per_job"] is not None else "-"
        print(f"{r['jobs']:>4} {r['agent_cpu_pct']:>12.3f} {per:>8} {r['shims_cpu_pct']:>12.3f} "
              f"{r['bare_sleeps_cpu_pct']:>12.3f} {r['agent_cpu_s_per_min']:>12.3f}")
    print("goal: idle < 0.5 % of a core, < 0.2 % of a core per running job")


if __name__ == "__main__":
    main()
