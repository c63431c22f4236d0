"""Submit latency at 0 queued vs 10,000 queued, production shape and ``make run`` shape (issue 10, item 1):
goal, the median at 10,000 within 1.2x of the median at 0. Also: My jobs, the pool page and the jobs API
answer in < 0.5 s with 10,000 waiting.

Production shape: a :class:`LocalStack` (uvicorn, a Celery worker, Redis), one 8-GPU node drained so every
job waits. ``make run`` shape: ``manage.py standalone`` (eager tasks, in-memory channel layer, its
coalescing cycle loop), both local agents drained. The 10,000 are stored in bulk, then one cycle runs
(places them), then ``--submits`` sequential submits are timed again.

    BENCH_DATABASE_URL=... BENCH_REDIS_URL=... .venv/bin/python benchmarks/submit_flat.py [--queued 10000]
        [--submits 40] [--shape both|production|standalone] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _stack import DATABASE_URL, REDIS_URL, ROOT, env, fresh_database, live_stack, manage, trivial_spec, user_token

FILL = """
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
u = User.objects.get(username='bench')
t = job_submit(owner=u, document={spec!r})
now = timezone.now()
Job.objects.bulk_create([Job(owner=u, name=f'fill-{{i}}', spec=t.spec, kind=t.kind, gpus_per_node=1,
    time_limit_s=t.time_limit_s, submitted_at=now + timedelta(microseconds=i), event_seq=1)
    for i in range({n})], batch_size=2000)
from apps.scheduling.adapter import schedule_cycle
print(schedule_cycle())
"""
SESSION = """
from django.contrib.auth.models import User
u = User.objects.get(username='bench'); u.set_password('bench-pass-31'); u.save(); print('ok')
"""


def login(url: str) -> dict[str, str]:
    """Sign ``bench`` in through the login form; returns the session cookies."""
    import re

    import httpx

    with httpx.Client(base_url=url, timeout=60) as c:
        page = c.get("/accounts/login/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        r = c.post("/accounts/login/", data={"username": "bench", "password": "bench-pass-31",
                                             "csrfmiddlewaretoken": token}, headers={"Referer": url + "/"})
        assert r.status_code == 302, r.status_code
        return dict(c.cookies)


DRAIN = ("from apps.pool.models import Node; from apps.pool.services import node_set_drain; "
         "[node_set_drain(node=n, drain=True) for n in Node.objects.all()]")


def shell(code: str, extra_env: dict[str, str] | None = None) -> str:
    return subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT,
                          env={**env(), **(extra_env or {})}, check=True, capture_output=True,
                          text=True).stdout.strip()


def measure(url: str, token: str, session: str | None, submits: int, queued: int, extra_env=None) -> dict:
    import httpx

    if queued:
        shell(FILL.format(spec=trivial_spec("fill"), n=queued), extra_env)
    with httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=60) as c:
        times = []
        for i in range(submits):
            t = time.perf_counter()
            r = c.post("/api/v1/jobs/", json=trivial_spec(f"flat-{i}"))
            times.append(time.perf_counter() - t)
            assert r.status_code == 201, r.text
        pages = {}
        cookies = login(url)
        for name, path, auth in (("my_jobs", "/", False), ("pool_page", "/pool/", False),
                                 ("api_jobs", "/api/v1/jobs/", True)):
            samples = []
            for _ in range(5):
                t = time.perf_counter()
                r = (c.get(path) if auth else httpx.get(url + path, cookies=cookies, timeout=60))
                samples.append(time.perf_counter() - t)
                assert r.status_code == 200, (path, r.status_code)
            pages[name] = round(statistics.median(samples), 3)
    return {"median_submit_s": round(statistics.median(times), 4), "pages_s": pages}


def production(args) -> dict:
    out = {}
    for queued in (0, args.queued):
        with live_stack([("bench-node", "8xH100-80GB")]) as (stack, token):
            manage("shell", "-c", DRAIN)
            session = manage("shell", "-c", SESSION).splitlines()[-1]  # sets the password
            out[queued] = measure(stack.url, token, session, args.submits, queued)
    return out


def standalone(args) -> dict:
    import httpx

    from devstack import free_port

    out = {}
    for queued in (0, args.queued):
        fresh_database()
        token = user_token()
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="e31-flat-") as tmp:
            extra = {"REDIS_URL": "", "E31_CELERY_EAGER": "1", "E31_VAR_DIR": tmp, "E31_PORT": str(port),
                     "E31_DEMO_PASSWORD": "bench-demo"}
            proc = subprocess.Popen([sys.executable, "manage.py", "standalone", "--port", str(port)], cwd=ROOT,
                                    env={**env(), **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    try:
                        if len(httpx.get(url + "/api/v1/pool/", headers={"Authorization": f"Token {token}"},
                                         timeout=5).json()) >= 2:
                            break
                    except Exception:
                        pass
                    time.sleep(0.5)
                shell(DRAIN, extra)
                session = shell(SESSION, extra).splitlines()[-1]
                out[queued] = measure(url, token, session, args.submits, queued, extra)
            finally:
                proc.terminate()
                proc.wait(60)
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--submits", type=int, default=40)
    parser.add_argument("--shape", choices=("both", "production", "standalone"), default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result: dict = {"benchmark": "submit_flat", "queued": args.queued, "submits": args.submits,
                    "database": DATABASE_URL.rsplit("/", 1)[-1], "redis": REDIS_URL, "goal_ratio": 1.2}
    shapes = ("production", "standalone") if args.shape == "both" else (args.shape,)
    for shape in shapes:
        figures = production(args) if shape == "production" else standalone(args)
        empty, full = figures[0], figures[args.queued]
        result[shape] = {"empty": empty, "full": full,
                         "ratio": round(full["median_submit_s"] / empty["median_submit_s"], 2)}
    if args.json:
        print(json.dumps(result))
    else:
        for shape in shapes:
            r = result[shape]
            print(f"{shape}: median submit {r['empty']['median_submit_s'] * 1000:.1f} ms at 0 queued, "
                  f"{r['full']['median_submit_s'] * 1000:.1f} ms at {args.queued} queued (ratio {r['ratio']}, "
                  f"goal <= 1.2); pages with {args.queued} waiting: {r['full']['pages_s']} s (goal < 0.5)")
    return result


if __name__ == "__main__":
    os.environ.setdefault("E31_LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
