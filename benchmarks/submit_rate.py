"""Submissions per second from 4 parallel clients (goal >= 840/s; Slurm 22.05: ~420/s).

The pool (one node of 8 simulated GPUs) is drained, so every submission is
accepted and queued: this measures the submit path (validate, store, enqueue
a scheduling cycle on commit), not running. Baseline in the same run: the
same 4 clients doing a trivial authenticated read (``GET /api/v1/pool/``).

    .venv/bin/python benchmarks/submit_rate.py [--seconds 10] [--web 2] [--json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

from _stack import live_stack, manage, trivial_spec

CLIENTS = 4


def _client(urls: list[str], token: str, seconds: float, kind: str, idx: int, out) -> None:
    import httpx

    url = urls[idx % len(urls)]
    ok = bad = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=30) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if kind == "submit":
                r = c.post("/api/v1/jobs/", json=trivial_spec(f"bench-{idx}"))
                good = r.status_code == 201
            else:
                r = c.get("/api/v1/pool/")
                good = r.status_code == 200
            ok += good
            bad += not good
    out.put((ok, bad))


def run(urls: list[str], token: str, seconds: float, kind: str) -> tuple[float, int]:
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_client, args=(urls, token, seconds, kind, i, out)) for i in range(CLIENTS)]
    start = time.monotonic()
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    elapsed = time.monotonic() - start
    return sum(ok for ok, _ in results) / elapsed, sum(bad for _, bad in results)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--web", type=int, default=2, help="uvicorn processes (clients spread over them)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with live_stack([("bench-node", "8xH100-80GB")], web=args.web) as (stack, token):
        manage("shell", "-c", "from apps.pool.models import Node; from apps.pool.services import node_set_drain; "
                              "node_set_drain(node=Node.objects.get(name='bench-node'), drain=True)")
        baseline, _ = run(stack.urls, token, args.seconds, "read")
        rate, errors = run(stack.urls, token, args.seconds, "submit")
    result = {"benchmark": "submit_rate", "clients": CLIENTS, "web_processes": args.web,
              "seconds": args.seconds, "submissions_per_s": round(rate, 1), "errors": errors,
              "baseline_reads_per_s": round(baseline, 1), "ratio_to_baseline": round(rate / baseline, 3),
              "goal_per_s": 840, "slurm_per_s": 420}
    print(json.dumps(result) if args.json else
          f"submissions/s from {CLIENTS} clients over {args.web} web processes: {rate:.0f} "
          f"(errors {errors}); trivial reads/s same run: {baseline:.0f} (ratio {rate / baseline:.2f}); "
          f"goal >= 840, Slurm ~420")
    return result


if __name__ == "__main__":
    main()
