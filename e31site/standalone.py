"""Standalone mode: the whole site in one process, plus two local agents.

``make run`` calls ``manage.py standalone``. One process serves HTTP and
WebSockets (uvicorn), runs Celery tasks eagerly (no broker), runs scheduling
cycles in a coalescing loop of its own (:class:`apps.scheduling.cycle_loop.CycleLoop`:
what Celery and the Redis flag do in production; a request only asks for a
cycle, never runs one) and the periodic work (node watch, a cycle) on a timer; two agents with
simulated GPUs run as child processes, each in its own work dir; one that dies is
started again on the same work dir and token (:class:`LocalAgents`). Ctrl-C
(or SIGTERM) is a deliberate stop: running jobs end as cancelled by the operator
with their outputs packed (:func:`stop_jobs_by_operator`), then the server stops,
then the agents, and it waits for them, so nothing is left behind.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections

from apps.agent_api.tasks import sweep_storage_task
from apps.core.secretfile import read_or_create
from apps.hooks.tasks import webhook_sweep_task
from apps.jobs.operator import jobs_holding, jobs_stop_holding
from apps.jobs.tasks import node_watch_task
from apps.live.push import set_local_loop
from apps.metering.tasks import budget_alerts_task
from apps.pool.services import node_token_issue
from apps.scheduling.cycle_loop import CycleLoop, cycle_wanted, set_runner
from e31site.asgi import application

log = logging.getLogger("e31.standalone")


@dataclass(frozen=True)
class LocalAgent:
    """A local agent: node name and the GPUs it simulates (``4xH100-80GB``)."""

    name: str
    simulate: str


DEFAULT_AGENTS = (LocalAgent("node-a", "4xH100-80GB"), LocalAgent("node-b", "2xA100-40GB"))


def demo_account() -> tuple[str, str]:
    """Create or update the ``demo`` user. Returns (username, password).

    The password is ``E31_DEMO_PASSWORD`` if set, else one generated on the
    first run and kept in ``var/demo_password`` so later runs print the same.
    """
    path = Path(settings.VAR_DIR) / "demo_password"
    password = os.environ.get("E31_DEMO_PASSWORD", "")
    if not password:
        password = read_or_create(path, 12)
    user, _ = get_user_model().objects.get_or_create(username="demo", defaults={"is_staff": True,
                                                                                "is_superuser": True})
    if not user.check_password(password):
        user.set_password(password)
        user.save()
    return "demo", password


def metrics_token() -> str:
    """Set ``E31_METRICS_TOKEN`` (``/metrics``'s bearer) from the environment or, on a first run,
    one generated and kept in ``var/metrics_token`` (0600). Returns where a scraper finds it, in words."""
    if settings.E31_METRICS_TOKEN:
        return "E31_METRICS_TOKEN"
    path = Path(settings.VAR_DIR) / "metrics_token"
    settings.E31_METRICS_TOKEN = read_or_create(path, 24)
    return str(path)


def files_private() -> list[Path]:
    """Make the site's files at rest its user's alone (issue 11): ``var/`` and media 0700,
    the SQLite database (and its -wal/-shm), the secret key and the demo password 0600.

    New files are private already (``os.umask(0o077)`` in settings); this also fixes the
    modes an older install left (0644 files in 0755 directories). Returns what it changed.
    """
    var = Path(settings.VAR_DIR)
    media = Path(settings.MEDIA_ROOT)
    media.mkdir(mode=0o700, parents=True, exist_ok=True)
    db = Path(str(settings.DATABASES["default"]["NAME"]))
    wanted = {var: 0o700, media: 0o700, var / "secret_key": 0o600, var / "demo_password": 0o600,
              var / "metrics_token": 0o600}
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        wanted.update({db: 0o600, Path(f"{db}-wal"): 0o600, Path(f"{db}-shm"): 0o600})
    for root, dirs, files in os.walk(media):  # uploads and bundles stored before the umask
        wanted.update({Path(root) / d: 0o700 for d in dirs})
        wanted.update({Path(root) / f: 0o600 for f in files})
    changed = []
    for path, mode in wanted.items():
        try:
            if path.stat().st_mode & 0o777 != mode:
                path.chmod(mode)
                changed.append(path)
        except FileNotFoundError:
            continue
    return changed


_budget_checked_at = [0.0]  # monotonic seconds of the last budget scan (the beat thread's own)
_swept_at = [float("-inf")]  # monotonic seconds of the last storage sweep: the first at start
_hooks_swept_at = [0.0]  # monotonic seconds of the last webhook retry sweep


def periodic_work() -> None:
    """What Celery beat does in production: one node watch, and a scheduling cycle asked for; the
    budget alerts every ``E31_BUDGET_PERIOD_S``, the storage sweep every ``E31_SWEEP_PERIOD_S`` and the
    webhook retries every ``E31_WEBHOOK_SWEEP_PERIOD_S`` (settings' beat schedule; the tries themselves
    run on the webhook threads, never here)."""
    close_old_connections()
    try:
        node_watch_task()
        if time.monotonic() - _budget_checked_at[0] >= settings.CELERY_BEAT_SCHEDULE["budget-alerts"]["schedule"]:
            _budget_checked_at[0] = time.monotonic()
            budget_alerts_task()
        if time.monotonic() - _swept_at[0] >= settings.CELERY_BEAT_SCHEDULE["sweep-storage"]["schedule"]:
            _swept_at[0] = time.monotonic()
            sweep_storage_task()  # retention (issue 15): daily
        if time.monotonic() - _hooks_swept_at[0] >= settings.CELERY_BEAT_SCHEDULE["webhook-sweep"]["schedule"]:
            _hooks_swept_at[0] = time.monotonic()
            webhook_sweep_task()
    finally:
        close_old_connections()
    cycle_wanted()


class Beat(threading.Thread):
    """Runs :func:`periodic_work` every ``period`` seconds in this thread (its own database
    connection; pushes reach the in-memory channel layer through the server's loop,
    :func:`apps.live.push.set_local_loop`), and starts again a local agent that died
    (:meth:`LocalAgents.check`)."""

    def __init__(self, period: float):
        super().__init__(name="e31-beat", daemon=True)
        self.period = period
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped = threading.Event()
        self.agents: LocalAgents | None = None

    def run(self) -> None:
        while not self.stopped.wait(self.period):
            if self.loop is None:
                continue
            if self.agents is not None:
                try:
                    for name in self.agents.check():
                        print(f"  agent {name} died; started it again", flush=True)
                except Exception:
                    log.exception("agent watch failed")
            try:
                periodic_work()
            except Exception:
                log.exception("periodic work failed")


def start_agents(url: str, agents: tuple[LocalAgent, ...]) -> list[subprocess.Popen]:
    """Issue a fresh token per node and start ``e31-agent`` for each, logging to var/agents/<name>.log."""
    return LocalAgents(url, agents).start()


class LocalAgents:
    """The local agents of ``make run``, watched: one that dies (a crash, ``kill -9``) is started
    again on its work dir and token, so it takes its running jobs up again (SPEC §6); a stop
    (:meth:`stop`) is final.

    :meth:`check` runs on the beat thread; a restart waits ``RESTART_MIN_S`` doubling up to
    ``RESTART_MAX_S`` while an agent keeps dying at once.
    """

    RESTART_MIN_S = 1.0
    RESTART_MAX_S = 60.0

    def __init__(self, url: str, agents: tuple[LocalAgent, ...]):
        self.url = url
        self.agents = agents
        self.procs: dict[str, subprocess.Popen] = {}
        self.tokens: dict[str, str] = {}
        self.restarts: dict[str, int] = {}
        self._next_try: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stopping = False

    def start(self) -> list[subprocess.Popen]:
        """Issue a fresh token per node and start each agent. Returns the processes."""

        with self._lock:
            for agent in self.agents:
                self.tokens[agent.name] = node_token_issue(name=agent.name)
                self.procs[agent.name] = self._spawn(agent)
            return list(self.procs.values())

    def _spawn(self, agent: LocalAgent) -> subprocess.Popen:
        workdir = Path(settings.VAR_DIR) / "agents" / agent.name
        workdir.mkdir(parents=True, exist_ok=True)
        logfile = open(workdir / "agent.log", "ab")  # noqa: SIM115 - kept open for the child's life
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "SECRET_"))}
        env["E31_NODE_TOKEN"] = self.tokens[agent.name]
        # A process group of its own: a terminal's Ctrl-C (SIGINT to the whole foreground group) must
        # reach only this process, which first stops the jobs as the operator (outputs packed, billed
        # to the stop), then the agents; an agent that caught SIGINT itself would drop its job.
        return subprocess.Popen(
            [sys.executable, "-m", "e31_agent.cli", "--server", self.url, "--simulate", agent.simulate,
             "--workdir", str(workdir)],
            stdout=logfile, stderr=subprocess.STDOUT, env=env, process_group=0,
        )

    def check(self, now: float | None = None) -> list[str]:
        """Start again each agent that died. Returns the names of those started again."""
        now = time.monotonic() if now is None else now
        started = []
        with self._lock:
            for agent in self.agents:
                proc = self.procs.get(agent.name)
                if self._stopping or proc is None or proc.poll() is None:
                    continue
                if now < self._next_try.get(agent.name, 0.0):
                    continue
                delay = self._delay.get(agent.name, self.RESTART_MIN_S)
                log.warning("agent %s exited with status %s; starting it again (logs in var/agents/%s/agent.log)",
                            agent.name, proc.returncode, agent.name)
                self.procs[agent.name] = self._spawn(agent)
                self.restarts[agent.name] = self.restarts.get(agent.name, 0) + 1
                self._next_try[agent.name] = now + delay
                self._delay[agent.name] = min(self.RESTART_MAX_S, delay * 2)
                started.append(agent.name)
            for agent in self.agents:  # one that stayed up a while is back to the short delay
                if agent.name not in started and now >= self._next_try.get(agent.name, 0.0) + self.RESTART_MAX_S:
                    self._delay.pop(agent.name, None)
        return started

    def stop(self, timeout: float = 45.0) -> None:
        """Stop watching, then stop every agent (:func:`stop_agents`)."""
        with self._lock:
            self._stopping = True
            procs = list(self.procs.values())
        stop_agents(procs, timeout)


def stop_agents(procs: list[subprocess.Popen], timeout: float = 45.0) -> None:
    """SIGTERM each agent (it stops its jobs), wait, then SIGKILL what is left."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


STOP_PACK_S = 30  # seconds a stop waits, beyond the grace period, for the jobs' outputs to be packed


def stop_jobs_by_operator(timeout_s: float) -> None:
    """Cancel every job holding GPUs as the operator and wait (at most ``timeout_s`` seconds) until
    each is released, printing what it waits for. Runs in a thread of its own (database calls)."""
    try:
        ids = jobs_stop_holding(reason="the site was stopped")
        if not ids:
            return
        print(f"  stopping {len(ids)} running job(s): cancelled by the operator, outputs packed...", flush=True)
        deadline = time.monotonic() + timeout_s
        while (left := jobs_holding(ids)) and time.monotonic() < deadline:
            time.sleep(0.25)
        if left:
            print(f"  {left} job(s) did not finish packing in {timeout_s:.0f} s; the next start recovers them",
                  flush=True)
    except Exception:
        log.exception("stopping the running jobs failed")
    finally:
        close_old_connections()


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first stop signal (Ctrl-C, SIGTERM) first runs ``drain`` in a thread
    and only then stops serving; a second signal stops at once (uvicorn's own handling)."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], None]) -> None:
        super().__init__(config)
        self.drain = drain
        self.draining: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.draining is None and not self.should_exit:
            self.draining = threading.Thread(target=self._drain_then_exit, name="e31-stop", daemon=True)
            self.draining.start()
            return
        super().handle_exit(sig, frame)

    def _drain_then_exit(self) -> None:
        try:
            self.drain()
        finally:
            self.should_exit = True


def server_config(host: str, port: int, app: Callable = application) -> uvicorn.Config:
    """uvicorn's settings for the standalone site.

    ``proxy_headers`` is off: ``make run`` is reached directly, so ``X-Forwarded-For`` and
    ``-Proto`` come from the client, never from a proxy. uvicorn's default trusts them from
    127.0.0.1, where every local caller connects, so a forged address per request got past the
    per-address sign-in lockout (issue 26 item 7). A proxy put in front names its header with
    ``E31_PROXY_IP_HEADER`` (settings: the lockout then reads that header, else the socket's peer).
    The graceful stop is bounded at 3 s: open long polls of the local agents would hold it up to
    their wait.
    """
    return uvicorn.Config(app, host=host, port=port, lifespan="off", ws="websockets", log_level="warning",
                          access_log=False, timeout_graceful_shutdown=3, proxy_headers=False)


def serve(port: int, host: str = "127.0.0.1", agents: tuple[LocalAgent, ...] = DEFAULT_AGENTS) -> None:
    """Serve the site on ``host:port`` until interrupted, with the beat and local agents.

    HTTP and WebSockets are served by uvicorn, which hands request bodies to the
    app as they arrive (Daphne buffered each whole in memory first, daphne#483).
    """

    url = f"http://{host}:{port}"
    files_private()
    user, password = demo_account()
    metrics_bearer = metrics_token()
    beat = Beat(settings.CELERY_BEAT_SCHEDULE["schedule-cycle"]["schedule"])
    cycles = CycleLoop()
    local_agents = LocalAgents(url, agents)

    async def ready() -> None:
        await sync_to_async(local_agents.start)()  # database calls: not on the loop
        beat.agents = local_agents  # watched from the beat thread: one that dies is started again
        beat.loop = asyncio.get_running_loop()
        set_local_loop(beat.loop)  # before the first push or cycle
        set_runner(cycles.wake)
        cycles.start()
        print(f"\n  E31 Network is running at {url}/\n  Sign in as {user} / {password}\n"
              f"  Agents: {', '.join(f'{a.name} ({a.simulate})' for a in agents)}; logs in var/agents/\n"
              f"  Metrics: {url}/metrics with the bearer token in {metrics_bearer}\n"
              "  Press Ctrl-C to stop.\n", flush=True)

    def end_running_jobs() -> None:
        """A deliberate stop: no new placements, then every running job ends as cancelled by the
        operator with its outputs packed, while the server still takes the agents' reports."""
        beat.stopped.set()
        cycles.stop()
        stop_jobs_by_operator(timeout_s=settings.E31_GRACE_S + STOP_PACK_S)
        stop_local_agents()  # before the server: no agent long poll is left to cut at its shutdown

    agents_stopped = threading.Event()

    def stop_local_agents() -> None:
        if not agents_stopped.is_set():
            agents_stopped.set()
            print("  stopping agents...", flush=True)
            local_agents.stop()

    server = DrainingServer(server_config(host, port), drain=end_running_jobs)

    async def run() -> None:
        serving = asyncio.create_task(server.serve())  # installs its own SIGINT/SIGTERM handlers
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            await ready()
        await serving

    def stop_requested(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # uvicorn handles SIGINT and SIGTERM while it serves, then raises the signal it caught again
    # with the handler found before it: SIGTERM's default would end the process before the
    # agents (and their jobs) are stopped. Both are a stop request here.
    signal.signal(signal.SIGTERM, stop_requested)
    beat.start()
    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass  # the stop uvicorn raised again once it had shut down: a normal stop
    finally:
        beat.stopped.set()
        cycles.stop()
        stop_local_agents()
        print("  stopped.", flush=True)
