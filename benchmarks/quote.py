"""A quote before submit (issue 29 item 4; goal: within 200 ms at 10,000 queued): the start quote
of one more job, per GPU model it accepts, on the pool and queue of ``benchmarks/cycle_db.py``
(10,000 queued on 1,000 nodes x 8 GPUs, 70 % held), after a first cycle placed what fits.
Baseline in the same run: one steady real cycle (:func:`schedule_cycle`) on the same database.

    BENCH_DATABASE_URL=... .venv/bin/python benchmarks/quote.py [--jobs 10000] [--nodes 1000] [--runs 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta

from cycle import NOW
from cycle_db import filled_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    filled_database(args.jobs, args.nodes)
    from django.contrib.auth.models import User

    from apps.jobs.quotes import QuotedJob
    from apps.scheduling.adapter import pool_capacity, schedule_cycle, start_quotes

    now = datetime.fromtimestamp(NOW, UTC)
    schedule_cycle(now=now)
    owner = User.objects.get(username="acct-1")
    models = sorted({g.model for v in pool_capacity() for g in v.gpus})
    job = QuotedJob(gpus_per_node=1, nodes=1, time_limit_s=3600, gpu_models=(), gpu_memory_mib=0, cpus=0,
                    memory_mib=0, needs_runtime=False, mixed_models=False)
    variants = [QuotedJob(**{**job.__dict__, "gpu_models": (m,)}) for m in models]
    quote, one, cycle = [], [], []
    for i in range(args.runs):
        at = now + timedelta(seconds=5 * (i + 1))
        t = time.perf_counter()
        start_quotes(variants, owner_id=owner.pk, now=at)
        quote.append(time.perf_counter() - t)
        t = time.perf_counter()
        start_quotes(variants[:1], owner_id=owner.pk, now=at)
        one.append(time.perf_counter() - t)
        cycle.append(schedule_cycle(now=at)["seconds"])
    med = statistics.median
    out = {"models": len(models), "quote_all_models_ms": round(med(quote) * 1000, 1),
           "quote_one_model_ms": round(med(one) * 1000, 1), "cycle_ms": round(med(cycle) * 1000, 1), "goal_ms": 200}
    if args.json:
        print(json.dumps(out))
        return
    print(f"quote of one job at {args.jobs} queued on {args.nodes} nodes (median of {args.runs}): "
          f"{out['models']} models {out['quote_all_models_ms']} ms, one model {out['quote_one_model_ms']} ms; "
          f"a steady real cycle {out['cycle_ms']} ms (goal: quote <= 200 ms)")


if __name__ == "__main__":
    main()
