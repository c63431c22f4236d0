"""Live pages at scale: 1,000 WebSocket clients on one uvicorn process with channels-redis, jobs
changing state at a steady rate; beside it the same 1,000 clients polling the API every 5 s.

Goal (issue 5): p95 commit -> receipt <= 100 ms, no message lost, idle CPU near zero.

Set-up: a fresh database with 100 users of 10 queued jobs each; one uvicorn
process (the production web process, channels-redis on ``BENCH_REDIS_URL``).
Client *i* (signed in as the owner of job *i*) opens job *i*'s page socket,
so it is in ``job-<i>`` and in its owner's ``user-<owner>`` group, as a
browser on the job page is.

1. Idle: uvicorn's CPU and memory with no socket (the baseline), then with
   all 1,000 sockets open and nothing changing.
2. Push: a driver process moves jobs queued -> rented -> running -> output ->
   released through ``transition()`` at ``--rate`` changes a second (a job's
   next change comes ``--window / --rate`` seconds after its last). Each
   change is one message to the job's socket and one row to each of the
   owner's 10 sockets (11 deliveries). The driver stamps the commit (an
   ``on_commit`` registered before the push's own); the client stamps
   receipt of the fragment carrying that change's version. Lost = deliveries
   of a committed change never received.
3. Poll (what the peers do): the sockets close; the same 1,000 clients GET
   ``/api/v1/jobs/<i>/`` every 5 s (spread evenly) while the driver moves
   other jobs at the same rate: requests/s served, and staleness = time from
   a change's commit to the first poll that shows it.

Both clocks are this machine's ``time.time()``. CPU is uvicorn's own (user +
system) over each phase, as a percent of one core.

    .venv/bin/python benchmarks/ws_fanout.py [--clients 1000] [--rate 20] [--seconds 30] [--json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _stack import DATABASE_URL, REDIS_URL, ROOT, env, fresh_database, percentile

JOBS_PER_USER = 10
STATES = ["rented", "running", "output", "released"]
STATUS_RE = re.compile(r'id="job-(\d+)-status"[^>]*?data-version="(\d+) ', re.S)
ROW_RE = re.compile(r'id="job-row-(\d+)" data-version="(\d+) ')


def django_setup(eager: bool = False) -> None:
    os.environ.update(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, DJANGO_SETTINGS_MODULE="e31site.settings",
                      E31_CELERY_EAGER="1" if eager else "0")
    import django

    django.setup()


def seed(clients: int) -> tuple[list[int], dict[int, int], dict[int, str]]:
    """Users and queued jobs; returns job ids, job -> owner id, owner id -> session cookie."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from apps.jobs.models import Job, JobEvent

    users = clients // JOBS_PER_USER
    owners = User.objects.bulk_create([User(username=f"watcher-{u}") for u in range(users)])
    now = timezone.now()
    spec = {"name": "bench", "work": {"command": "true"}, "compute": {"gpus": 1, "time_limit": "5m"},
            "output": {"paths": []}}
    jobs = Job.objects.bulk_create([
        Job(owner=owners[i // JOBS_PER_USER], name=f"bench-{i}", spec=spec, gpus_per_node=1, time_limit_s=300,
            submitted_at=now, event_seq=1) for i in range(users * JOBS_PER_USER)])
    JobEvent.objects.bulk_create([JobEvent(job=j, seq=1, at=now, to_state="queued", detail="submitted")
                                  for j in jobs])
    cookies = {}
    for user in owners:
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        cookies[user.pk] = f"sessionid={session.session_key}"
    return [j.pk for j in jobs], {j.pk: j.owner_id for j in jobs}, cookies


def drive(job_ids: list[int], rate: float, seconds: float, window: int, out: str) -> None:
    """Driver process: ``rate`` changes a second for ``seconds``; writes [(job, seq, state, commit_t)] to ``out``."""
    django_setup()
    from django.db import transaction

    from apps.jobs.models import Job
    from apps.jobs.state import transition

    plan = []  # round-robin over a window of jobs, so one job changes every window / rate seconds
    for start in range(0, len(job_ids), window):
        chunk = job_ids[start:start + window]
        plan += [(job_id, state) for state in STATES for job_id in chunk]
    plan = plan[:int(rate * seconds)]
    commits = []
    t0 = time.monotonic()
    for n, (job_id, state) in enumerate(plan):
        time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
        stamp: dict[str, float] = {}
        with transaction.atomic():
            transaction.on_commit(lambda s=stamp: s.setdefault("t", time.time()))  # runs before the push
            job = Job.objects.select_for_update().get(pk=job_id)
            transition(job, state, detail="benchmark")
        commits.append((job_id, job.event_seq, state, stamp["t"]))
    Path(out).write_text(json.dumps(commits))


def start_driver(job_ids, rate, seconds, window) -> tuple[multiprocessing.Process, str]:
    out = tempfile.mktemp(prefix="e31-ws-commits-", suffix=".json")
    proc = multiprocessing.get_context("spawn").Process(target=drive, args=(job_ids, rate, seconds, window, out))
    proc.start()
    return proc, out


def movers_for(job_ids: list[int], phase: str) -> list[int]:
    """The jobs a phase moves: a random half of all, a different half for each phase."""
    shuffled = job_ids[:]
    random.Random(31).shuffle(shuffled)
    half = len(shuffled) // 2
    return shuffled[:half] if phase == "push" else shuffled[half:]


def driver_result(proc: multiprocessing.Process, out: str) -> list:
    """The driver's commits; raises if it failed."""
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"the driver exited with {proc.exitcode}")
    commits = json.loads(Path(out).read_text())
    os.unlink(out)
    return commits


class Meter:
    """uvicorn's CPU (percent of one core) and memory over a phase."""

    def __init__(self, pid: int):
        import psutil

        self.proc = psutil.Process(pid)

    def start(self) -> None:
        self.cpu0, self.t0 = self.proc.cpu_times(), time.monotonic()

    def stop(self) -> dict:
        cpu1, t1 = self.proc.cpu_times(), time.monotonic()
        used = (cpu1.user - self.cpu0.user) + (cpu1.system - self.cpu0.system)
        return {"cpu_percent": round(100 * used / (t1 - self.t0), 1),
                "rss_mb": round(self.proc.memory_info().rss / 2**20, 1)}


async def open_sockets(url: str, job_ids, owner_of, cookies, received) -> list:
    import websockets

    async def one(job_id: int):
        ws = await websockets.connect(f"{url}/ws/jobs/{job_id}/", max_size=2**22, open_timeout=60,
                                      origin="http://127.0.0.1",
                                      additional_headers={"Cookie": cookies[owner_of[job_id]]})
        await ws.recv()  # the snapshot

        async def listen():
            async for message in ws:
                now = time.time()
                for job, seq in STATUS_RE.findall(message):
                    received.setdefault((int(job), int(seq), job_id, "status"), now)
                for job, seq in ROW_RE.findall(message):
                    received.setdefault((int(job), int(seq), job_id, "row"), now)

        return ws, asyncio.create_task(listen())

    sockets = []
    for start in range(0, len(job_ids), 50):  # connect 50 at a time, as browsers arrive
        sockets += await asyncio.gather(*(one(j) for j in job_ids[start:start + 50]))
    return sockets


async def ws_phase(args, url, job_ids, owner_of, cookies, meter) -> dict:
    received: dict[tuple[int, int, int, str], float] = {}
    meter.start()  # baseline: the same uvicorn with no socket open
    await asyncio.sleep(args.idle_seconds)
    no_sockets = meter.stop()
    t = time.monotonic()
    sockets = await open_sockets(url, job_ids, owner_of, cookies, received)
    connect_s = time.monotonic() - t
    await asyncio.sleep(3)  # let the connect burst settle
    meter.start()
    await asyncio.sleep(args.idle_seconds)
    idle = meter.stop()

    movers = movers_for(job_ids, "push")  # each change goes to 1 + 10 sockets
    meter.start()
    proc, out = start_driver(movers, args.rate, args.seconds, args.window)
    while proc.is_alive():
        await asyncio.sleep(0.2)
    await asyncio.sleep(5)  # late deliveries
    load = meter.stop()
    commits = driver_result(proc, out)
    by_owner: dict[int, list[int]] = {}
    for job_id in job_ids:
        by_owner.setdefault(owner_of[job_id], []).append(job_id)
    latencies, lost, expected = [], 0, 0
    for job_id, seq, _state, t_commit in commits:
        for watcher in by_owner[owner_of[job_id]]:  # the job's own page: its status; the others: its row
            expected += 1
            got = received.get((job_id, seq, watcher, "status" if watcher == job_id else "row"))
            if got is None:
                lost += 1
            else:
                latencies.append(got - t_commit)
    for ws, task in sockets:
        task.cancel()
        await ws.close()
    ms = [x * 1000 for x in latencies]
    return {"clients": len(sockets), "connect_all_s": round(connect_s, 1), "changes": len(commits),
            "deliveries_expected": expected, "lost": lost,
            "p50_ms": round(statistics.median(ms), 1), "p95_ms": round(percentile(ms, 95), 1),
            "max_ms": round(max(ms), 1), "idle_no_sockets": no_sockets, "idle": idle, "load": load}


async def poll_phase(args, url, job_ids, owner_of, cookies, meter) -> dict:
    import aiohttp

    seen: dict[int, list[tuple[float, str]]] = {j: [] for j in job_ids}
    served, errors = 0, 0
    stop = asyncio.Event()

    async def poller(session, job_id: int, offset: float):
        nonlocal served, errors
        await asyncio.sleep(offset)
        while not stop.is_set():
            t = time.monotonic()
            try:
                async with session.get(f"{url}/api/v1/jobs/{job_id}/",
                                       headers={"Cookie": cookies[owner_of[job_id]]}) as resp:
                    body = await resp.json()
                    seen[job_id].append((time.time(), body["state"]))
                    served += 1
            except (TimeoutError, aiohttp.ClientError, KeyError, ValueError):
                errors += 1
            await asyncio.sleep(max(0.0, args.poll_interval - (time.monotonic() - t)))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        tasks = [asyncio.create_task(poller(session, j, i * args.poll_interval / len(job_ids)))
                 for i, j in enumerate(job_ids)]
        await asyncio.sleep(args.poll_interval + 1)  # every client has started
        meter.start()
        served0, t0 = served, time.monotonic()
        movers = movers_for(job_ids, "poll")
        proc, out = start_driver(movers, args.rate, args.seconds, args.window)
        while proc.is_alive():
            await asyncio.sleep(0.2)
        await asyncio.sleep(args.poll_interval + 1)  # the last change gets polled
        rps = (served - served0) / (time.monotonic() - t0)
        load = meter.stop()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    commits = driver_result(proc, out)
    order = {s: i for i, s in enumerate(["queued"] + STATES)}
    stale = []
    for job_id, _seq, state, t_commit in commits:
        first = next((t for t, s in seen[job_id] if t >= t_commit and order[s] >= order[state]), None)
        if first is not None:
            stale.append(first - t_commit)
    return {"clients": len(job_ids), "interval_s": args.poll_interval, "requests_per_s": round(rps, 1),
            "errors": errors, "changes": len(commits), "changes_seen": len(stale),
            "mean_staleness_s": round(statistics.mean(stale), 2) if stale else None,
            "p95_staleness_s": round(percentile(stale, 95), 2) if stale else None, "load": load}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="state changes per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each loaded phase")
    parser.add_argument("--window", type=int, default=50, help="jobs moved round-robin at a time")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    fresh_database()
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    django_setup()
    job_ids, owner_of, cookies = seed(args.clients)
    from django.conf import settings  # the sessions above are signed with this process's key

    from devstack import free_port, web_command

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="e31-ws-bench-") as tmp:
        log_path = Path(os.environ.get("BENCH_DAPHNE_LOG") or Path(tmp) / "daphne.log")
        log = open(log_path, "wb")  # noqa: SIM115 - closed below
        daphne = subprocess.Popen(web_command("127.0.0.1", port), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  env={**env(), "E31_VAR_DIR": tmp, "SECRET_KEY": settings.SECRET_KEY})
        try:
            import httpx

            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/accounts/login/", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("daphne did not start")
                time.sleep(0.2)
            meter = Meter(daphne.pid)
            ws_url = url.replace("http://", "ws://")
            push = asyncio.run(ws_phase(args, ws_url, job_ids, owner_of, cookies, meter))
            poll = asyncio.run(poll_phase(args, url, job_ids, owner_of, cookies, meter))
        finally:
            daphne.terminate()
            daphne.wait(timeout=20)
            log.close()
    result = {"benchmark": "ws_fanout", "rate_per_s": args.rate, "seconds": args.seconds, "push": push,
              "poll": poll, "goal_p95_ms": 100,
              "ratio_poll_staleness_to_push_p50": round(poll["mean_staleness_s"] * 1000 / push["p50_ms"], 1)
              if poll["mean_staleness_s"] and push["p50_ms"] else None}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"push: {push['clients']} sockets on one uvicorn, {push['changes']} changes at {args.rate:g}/s "
              f"({push['deliveries_expected']} deliveries): commit->receipt p50 {push['p50_ms']} ms, "
              f"p95 {push['p95_ms']} ms, max {push['max_ms']} ms, lost {push['lost']}; uvicorn with no socket "
              f"{push['idle_no_sockets']['cpu_percent']} % CPU, {push['idle_no_sockets']['rss_mb']} MB; idle "
              f"{push['idle']['cpu_percent']} % CPU, {push['idle']['rss_mb']} MB; under load "
              f"{push['load']['cpu_percent']} % CPU, {push['load']['rss_mb']} MB")
        print(f"poll: {poll['clients']} clients every {poll['interval_s']:g} s: {poll['requests_per_s']} requests/s "
              f"served ({poll['errors']} errors), mean staleness {poll['mean_staleness_s']} s "
              f"(p95 {poll['p95_staleness_s']} s) over {poll['changes_seen']}/{poll['changes']} changes; uvicorn "
              f"{poll['load']['cpu_percent']} % CPU, {poll['load']['rss_mb']} MB")
    return result


if __name__ == "__main__":
    main()
