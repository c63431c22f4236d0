"""The meter at scale: one account's usage page and CSV, the spend-limit check at submit, and
``meter_check`` over the whole ledger, on 20,000 leases (issue 6).

Baselines measured in the same run: the usage page against reading the same leases with
their job and node (the ORM alone); ``meter_check`` against loading the whole ledger;
the submit-time spend-limit check against the same account without a limit.
Each figure is the median of ``--runs`` runs (default 3). Needs PostgreSQL: the database
``BENCH_DATABASE_URL`` (default ``.../e31_bench_meter``) is dropped and re-created.

    .venv/bin/python benchmarks/meter.py [--leases 20000] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/e31_bench_meter")

from benchmarks import _stack  # noqa: E402


def timed(fn, runs: int) -> float:
    """Median wall seconds of ``fn()`` over ``runs`` runs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(n_leases: int) -> None:
    """``n_leases`` closed leases of one account over 90 days, 1-8 GPUs each, on 100 nodes of 8 GPUs."""
    import random

    from django.contrib.auth.models import User

    from apps.jobs.models import Job
    from apps.metering import billing
    from apps.metering.models import Lease, LeaseGpu
    from apps.pool.models import Gpu, Node

    rng = random.Random(6)
    user = User.objects.create(username="bench")
    nodes = Node.objects.bulk_create([Node(name=f"n{i}", state="up") for i in range(100)])
    gpus = Gpu.objects.bulk_create([Gpu(node=n, index=i, uuid=f"g{n.pk}-{i}", model="H100-80GB", memory_mb=81559)
                                    for n in nodes for i in range(8)])
    by_node = {n.pk: [g for g in gpus if g.node_id == n.pk] for n in nodes}
    start = datetime(2025, 1, 1, tzinfo=UTC)
    slot = timedelta(days=90) / (n_leases / len(nodes))  # leases on one node follow each other
    jobs, leases = [], []
    for i in range(n_leases):
        node = nodes[i % len(nodes)]
        rented = start + slot * (i // len(nodes))
        seconds = rng.randint(30, int(slot.total_seconds()) - 10)
        count = rng.choice([1, 2, 4, 8])
        jobs.append(Job(owner=user, name=f"job-{i}", spec={"compute": {"gpus": count, "time_limit": "10h"}},
                        gpus_per_node=count, time_limit_s=36000, state="released", outcome="succeeded",
                        submitted_at=rented, rented_at=rented, released_at=rented + timedelta(seconds=seconds + 5)))
        billed = billing.billed_seconds(rented, rented + timedelta(seconds=seconds), 36000)
        leases.append((node, count, rented, seconds, billed))
    jobs = Job.objects.bulk_create(jobs, batch_size=2000)
    rows = [Lease(job=job, attempt=1, node=node, gpu_count=count, gpu_model="H100-80GB",
                  rate_per_gpu_hour=Decimal("2.49"), time_limit_s=36000, rented_at=rented,
                  run_ended_at=rented + timedelta(seconds=seconds),
                  released_at=rented + timedelta(seconds=seconds + 5), billed_seconds=billed,
                  cost=billing.cost(billed, count, Decimal("2.49")), end_reason="exit")
            for job, (node, count, rented, seconds, billed) in zip(jobs, leases, strict=True)]
    rows = Lease.objects.bulk_create(rows, batch_size=2000)
    LeaseGpu.objects.bulk_create([LeaseGpu(lease=lease, gpu=gpu, open=False) for lease in rows
                                  for gpu in by_node[lease.node_id][:lease.gpu_count]], batch_size=5000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = _stack.DATABASE_URL
    _stack.fresh_database()
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "e31site.settings")
    django.setup()
    from django.contrib.auth.models import User
    from django.utils import timezone

    from apps.core.models import AccountProfile
    from apps.metering.checks import meter_violations
    from apps.metering.limits import spend_check
    from apps.metering.models import Lease
    from apps.metering.selectors import usage_rows, with_line_fields
    from apps.metering.statements import by_day, chart_data, statement_of

    build(args.leases)
    user = User.objects.get(username="bench")
    tz = UTC
    now = timezone.now()

    def orm_only():
        return list(with_line_fields(Lease.objects.filter(job__owner=user)))

    def usage_page():
        statement = statement_of(orm_only(), now)
        chart_data(by_day(statement, tz))
        usage_rows(statement, tz)

    def ledger_only():
        return list(Lease.objects.select_related("job"))

    t_orm, t_page = timed(orm_only, args.runs), timed(usage_page, args.runs)
    t_load, t_check = timed(ledger_only, args.runs), timed(meter_violations, args.runs)
    assert meter_violations() == [], "the benchmark ledger should be consistent"
    t_nolimit = timed(lambda: spend_check(owner=user, worst_case=Decimal("10"), now=now), args.runs)
    AccountProfile.objects.create(owner=user, monthly_spend_limit=Decimal("1000000"))
    t_limit = timed(lambda: spend_check(owner=user, worst_case=Decimal("10"), now=now), args.runs)

    print(f"meter at {args.leases:,} leases of one account (median of {args.runs}):")
    print(f"  usage page data (statement, days, chart, CSV rows): {t_page:.2f} s; reading the leases alone "
          f"{t_orm:.2f} s; ratio {t_page / t_orm:.1f}x")
    print(f"  meter_check over the whole ledger: {t_check:.2f} s; loading the ledger alone {t_load:.2f} s; "
          f"ratio {t_check / t_load:.1f}x")
    print(f"  spend-limit check at submit: {t_limit * 1000:.1f} ms with a limit (this month's leases), "
          f"{t_nolimit * 1000:.1f} ms without")


if __name__ == "__main__":
    main()
