"""The real scheduling cycle (database reads, writes, pushes) at 10,000 queued jobs on 1,000 nodes x 8 GPUs
(goal <= 1 s; issue 10, item 3). Baseline in the same run: the pure core (:func:`schedule`) on the same queue.

The pool and queue are those of ``benchmarks/cycle.py`` (same seed), stored in a fresh
PostgreSQL database (``BENCH_DATABASE_URL``): 70 % of the GPUs held by running jobs
(one lease each), the rest free, so the first cycle places many jobs and writes every
queued job's place. Figures:

- ``first``: the first cycle (placements, every position/estimate/reason written);
- ``steady``: median of ``--runs`` cycles after it, the clock ``--step`` seconds later each
  time (what a cycle costs when little changed: estimates drift, positions do not);
- ``after_submit``: median of cycles each after one more job is queued at the end;
- ``core``: the pure core on the same requests (no database), the baseline.

    BENCH_DATABASE_URL=... .venv/bin/python benchmarks/cycle_db.py [--jobs 10000] [--nodes 1000] [--runs 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from _stack import DATABASE_URL, REDIS_URL, fresh_database
from cycle import NOW, build_pool, build_queue


def setup_django() -> None:
    os.environ.update(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, E31_CELERY_EAGER="0",
                      E31_LOG_LEVEL="WARNING", DJANGO_SETTINGS_MODULE="e31site.settings")
    import django

    django.setup()


def fill(n_jobs: int, n_nodes: int) -> None:
    """Store the pool (nodes, GPUs, running jobs holding 70 % of the GPUs) and the queue."""
    from decimal import Decimal

    from django.contrib.auth.models import User

    from apps.jobs.models import Job
    from apps.metering.models import Lease, LeaseGpu
    from apps.pool.models import Gpu, Node

    rng = random.Random(31)
    views, queue = build_pool(n_nodes, rng), build_queue(n_jobs, rng)
    now = datetime.fromtimestamp(NOW, UTC)
    users = {f"acct-{a}": User.objects.create(username=f"acct-{a}") for a in range(40)}
    nodes = Node.objects.bulk_create([Node(name=v.name, state=v.state, cpus=v.cpus_total,
                                           memory_bytes=v.memory_total_mib * 2**20, runtimes=list(v.runtimes))
                                      for v in views])
    gpus = Gpu.objects.bulk_create([Gpu(node=n, index=k, uuid=f"GPU-{n.pk}-{k}", model=g.model,
                                        memory_mb=g.memory_mib)
                                    for n, v in zip(nodes, views, strict=True) for k, g in enumerate(v.gpus)])
    busy = [(n, gpu, slot) for i, (n, v) in enumerate(zip(nodes, views, strict=True))
            for gpu, slot in zip(gpus[i * 8:i * 8 + 8], v.gpus, strict=True) if slot.free_at > NOW]
    owner = users["acct-0"]
    spec = {"name": "run", "work": {"command": "true", "kind": "other"}, "compute": {"gpus": 1}}
    running = Job.objects.bulk_create([
        Job(owner=owner, name="run", spec=spec, gpus_per_node=1, time_limit_s=int(slot.free_at - NOW) + 60,
            state="running", submitted_at=now - timedelta(seconds=90), rented_at=now - timedelta(seconds=60),
            event_seq=1) for _, _, slot in busy])
    leases = Lease.objects.bulk_create([
        Lease(job=job, attempt=1, node=n, gpu_count=1, gpu_model=gpu.model, rate_per_gpu_hour=Decimal("2"),
              time_limit_s=job.time_limit_s, rented_at=job.rented_at,
              predicted_runtime_s=(slot.expected_free_at - NOW + 60) if slot.expected_free_at else None)
        for job, (n, gpu, slot) in zip(running, busy, strict=True)])
    LeaseGpu.objects.bulk_create([LeaseGpu(lease=lease, gpu=gpu) for lease, (_, gpu, _) in
                                  zip(leases, busy, strict=True)])
    Job.objects.bulk_create([Job(owner=users[r.account], name=f"q{r.job_id}", spec={
        "name": f"q{r.job_id}", "work": {"command": "true", "kind": "other", **({"image": "x"} if r.needs_runtime
                                                                               else {})},
        "compute": {"gpus": r.gpus_per_node, "nodes": r.nodes, "gpu_model": list(r.gpu_models),
                    "gpu_memory_gb": r.gpu_memory_mib / 1000 or None, "cpus": r.cpus,
                    "memory_gb": round(r.memory_mib * 2**20 / 1e9) or None}},
        gpus_per_node=r.gpus_per_node, nodes=r.nodes, time_limit_s=r.time_limit_s,
        gpu_models=list(r.gpu_models), gpu_memory_mib=r.gpu_memory_mib, cpus=r.cpus, memory_mib=r.memory_mib,
        needs_runtime=r.needs_runtime,
        priority_boost=r.priority_boost, submitted_at=datetime.fromtimestamp(r.submitted_at, UTC), event_seq=1)
        for r in queue], batch_size=2000)


def filled_database(n_jobs: int, n_nodes: int) -> None:
    """A fresh database holding :func:`fill`'s pool and queue, Django set up, statistics analysed."""
    fresh_database()
    setup_django()
    fill(n_jobs, n_nodes)
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE")


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--step", type=float, default=5.0, help="seconds the clock moves between cycles")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    filled_database(args.jobs, args.nodes)
    from apps.jobs.models import Job
    from apps.scheduling.adapter import policy_from_settings, pool_views, schedule_cycle
    from apps.scheduling.core import job_request, schedule
    from apps.scheduling.ports import job_queue

    now = datetime.fromtimestamp(NOW, UTC)
    first = schedule_cycle(now=now)
    steady = []
    for i in range(args.runs):
        steady.append(schedule_cycle(now=now + timedelta(seconds=args.step * (i + 1))))
    after = []
    template = Job.objects.filter(state="queued").last()
    for i in range(args.runs):
        template.pk = None
        template.submitted_at = now + timedelta(seconds=i)
        template.save()
        after.append(schedule_cycle(now=now + timedelta(seconds=args.step * (args.runs + i + 1))))
    # The pure core on the same queue and pool, read once: the baseline.
    rows, views = job_queue().queued(), pool_views(now)
    requests = [job_request(r, job_id=r.job_id, account=r.owner_id, submitted_at_s=r.submitted_at_s) for r in rows]
    core = []
    for _ in range(args.runs):
        t = time.perf_counter()
        schedule(requests, views, NOW + 100, policy_from_settings(), {})
        core.append(time.perf_counter() - t)
    med = statistics.median
    result = {"benchmark": "cycle_db", "jobs": args.jobs, "nodes": args.nodes, "runs": args.runs,
              "first_ms": round(first["seconds"] * 1000, 1), "first_placed": first["placed"],
              "first_written": first["written"],
              "steady_ms": round(med(c["seconds"] for c in steady) * 1000, 1),
              "steady_written": [c["written"] for c in steady],
              "after_submit_ms": round(med(c["seconds"] for c in after) * 1000, 1),
              "core_ms": round(med(core) * 1000, 1), "queued": steady[-1]["queued"], "goal_ms": 1000}
    result["steady_over_core"] = round(result["steady_ms"] / result["core_ms"], 2)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"real cycle, {result['queued']} queued on {args.nodes} nodes x 8 GPUs (median of {args.runs}):")
        print(f"  first cycle   {result['first_ms']:8.1f} ms  placed {first['placed']}, "
              f"wrote {first['written']} queued rows")
        print(f"  steady cycle  {result['steady_ms']:8.1f} ms  rows written {result['steady_written']}")
        print(f"  after submit  {result['after_submit_ms']:8.1f} ms")
        print(f"  pure core     {result['core_ms']:8.1f} ms  (baseline, no database)")
        print(f"  steady / core = {result['steady_over_core']}; goal real cycle <= 1000 ms")
    return result


if __name__ == "__main__":
    main()
