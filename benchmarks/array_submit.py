"""Job arrays: time to accept an array of 1,000 and of 10,000 tasks (goal: 10,000 in <= 2 s),
and My jobs, the pool page and the API while those 10,000 wait (goal: each < 0.5 s).

Baselines in the same run: one ordinary single-job submit through the same API, and a bare
``bulk_create`` of the same number of job rows (no validation, no events, no hooks: the
floor for any way of storing N jobs through the ORM).

In-process: requests go through Django's test client (the whole view, middleware, serializer
and commit hooks; no HTTP server), against a fresh database (``BENCH_DATABASE_URL``) and Redis
(``BENCH_REDIS_URL``) as in ``_stack.py``. Celery is not eager and no worker runs: the
scheduling cycle an array asks for is one message on the broker, as in production; its cost
belongs to the scheduler's own benchmark (``cycle.py``). Each figure is min / median of
``--runs`` (default 3); after each array is timed it is cancelled (timed too), except the last
10,000, which stays queued while the pages are timed.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/e31_bench_mine \\
        .venv/bin/python benchmarks/array_submit.py [--runs 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _stack import DATABASE_URL, REDIS_URL, fresh_database, trivial_spec

GOAL_ACCEPT_S = 2.0
GOAL_PAGE_S = 0.5


def _setup_django() -> None:
    os.environ.update(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, E31_CELERY_EAGER="0",
                      E31_LOG_LEVEL="WARNING", DJANGO_SETTINGS_MODULE="e31site.settings")
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]


def _timed(func) -> tuple[float, object]:
    start = time.perf_counter()
    out = func()
    return time.perf_counter() - start, out


def _fig(values: list[float]) -> dict[str, float]:
    return {"min_s": round(min(values), 4), "median_s": round(statistics.median(values), 4)}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    fresh_database()
    _setup_django()

    from django.contrib.auth.models import User
    from django.db import transaction
    from django.test import Client
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from apps.jobs.arrays import array_cancel
    from apps.jobs.models import Job, JobArray
    from apps.pool.models import Gpu, Node

    user = User.objects.create_user("bench", is_staff=True)
    token = Token.objects.create(user=user).key
    node = Node.objects.create(name="bench-node", state="up", hostname="bench-node", cpus=64,
                               memory_bytes=512 * 10**9, disk_bytes=10**12, simulated=True,
                               last_heartbeat_at=timezone.now(), registered_at=timezone.now())
    Gpu.objects.bulk_create([Gpu(node=node, index=i, uuid=f"GPU-bench-{i}", model="H100-80GB", memory_mb=81559)
                             for i in range(8)])
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    web = Client()
    web.force_login(user)

    def submit(doc: dict) -> dict:
        resp = api.post("/api/v1/jobs/", doc, content_type="application/json")
        assert resp.status_code == 201, resp.content[:500]
        return resp.json()

    submit(trivial_spec("warm-up"))  # imports, connections, caches
    Job.objects.all().delete()
    single = [_timed(lambda: submit(trivial_spec("single")))[0] for _ in range(max(5, args.runs))]
    Job.objects.all().delete()

    def bare_insert(n: int) -> float:
        template = Job.objects.create(owner=user, name="bare", spec=trivial_spec("bare"), gpus_per_node=1,
                                      time_limit_s=300, submitted_at=timezone.now())
        fields = {f.attname: getattr(template, f.attname) for f in Job._meta.concrete_fields if not f.primary_key}
        template.delete()
        with transaction.atomic():
            elapsed, _ = _timed(lambda: Job.objects.bulk_create([Job(**fields) for _ in range(n)], batch_size=2000))
            transaction.set_rollback(True)
        return elapsed

    results: dict = {"benchmark": "array_submit", "runs": args.runs,
                     "single_submit": _fig(single), "sizes": {}}
    for size in (1_000, 10_000):
        accept, cancel, bare = [], [], []
        for run in range(args.runs):
            bare.append(bare_insert(size))
            doc = {**trivial_spec(f"sweep-{size}"), "array": size}
            elapsed, body = _timed(lambda: submit(doc))  # noqa: B023 - called at once
            assert len(body["job_ids"]) == size
            accept.append(elapsed)
            if size == 10_000 and run == args.runs - 1:
                break  # this one waits while the pages are timed
            array = JobArray.objects.get(pk=body["array_id"])
            cancel.append(_timed(lambda: array_cancel(array=array))[0])  # noqa: B023 - called at once
        med = statistics.median(accept)
        results["sizes"][size] = {
            "accept": _fig(accept), "cancel": _fig(cancel) if cancel else None, "bare_bulk_insert": _fig(bare),
            "per_task_ms": round(med / size * 1000, 4),
            "ratio_to_single_submit": round(med / statistics.median(single), 1),
            "ratio_to_bare_insert": round(med / statistics.median(bare), 2),
        }

    waiting = Job.objects.filter(state="queued").count()
    array_id = JobArray.objects.latest("submitted_at").pk
    pages = {
        "my_jobs": lambda: web.get("/"),
        "my_jobs_queued": lambda: web.get("/?state=queued"),
        "array_page": lambda: web.get(f"/arrays/{array_id}/"),
        "array_page_last": lambda: web.get(f"/arrays/{array_id}/?page=200"),
        "pool_page_staff": lambda: web.get("/pool/"),
        "api_jobs": lambda: api.get("/api/v1/jobs/"),
        "api_jobs_queued": lambda: api.get("/api/v1/jobs/?state=queued"),
        "api_array_tasks": lambda: api.get(f"/api/v1/jobs/?array={array_id}&page=100"),
        "api_arrays": lambda: api.get("/api/v1/arrays/"),
        "api_array": lambda: api.get(f"/api/v1/arrays/{array_id}/"),
        "api_pool": lambda: api.get("/api/v1/pool/"),
    }
    results["waiting"] = waiting
    results["pages"] = {}
    for name, get in pages.items():
        times = []
        for _ in range(max(3, args.runs)):
            elapsed, resp = _timed(get)
            assert resp.status_code == 200, (name, resp.status_code)
            times.append(elapsed)
        results["pages"][name] = _fig(times)
    slowest = max(results["pages"].values(), key=lambda f: f["median_s"])["median_s"]
    results["goals"] = {
        "accept_10000_s": GOAL_ACCEPT_S,
        "accept_10000_met": results["sizes"][10_000]["accept"]["median_s"] <= GOAL_ACCEPT_S,
        "page_s": GOAL_PAGE_S, "pages_met": slowest < GOAL_PAGE_S,
    }
    if args.json:
        print(json.dumps(results))
        return results
    print(f"one single-job submit: {results['single_submit']['median_s'] * 1000:.1f} ms (median of {len(single)})")
    for size, r in results["sizes"].items():
        cancel = f"; cancel {r['cancel']['median_s']:.3f} s" if r["cancel"] else ""
        print(f"array of {size:>6,}: accepted in {r['accept']['min_s']:.3f} / {r['accept']['median_s']:.3f} s "
              f"(min / median), {r['per_task_ms']} ms a task = {r['ratio_to_single_submit']}x one single submit, "
              f"{r['ratio_to_bare_insert']}x a bare bulk insert of {size:,} jobs "
              f"({r['bare_bulk_insert']['median_s']:.3f} s){cancel}")
    print(f"with {waiting:,} waiting (min / median):")
    for name, f in results["pages"].items():
        print(f"  {name:<18} {f['min_s'] * 1000:7.1f} / {f['median_s'] * 1000:7.1f} ms")
    g = results["goals"]
    print(f"goals: 10,000 accepted <= {GOAL_ACCEPT_S} s: {'met' if g['accept_10000_met'] else 'NOT met'}; "
          f"every page < {GOAL_PAGE_S} s: {'met' if g['pages_met'] else 'NOT met'} (slowest {slowest:.3f} s)")
    return results


if __name__ == "__main__":
    main()
