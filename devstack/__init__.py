"""Start the production shape on one machine, as child processes: for end-to-end
tests and benchmarks.

:class:`LocalStack` runs N uvicorn web processes, a Celery worker, optionally
Celery beat, and agents with simulated GPUs, all against the PostgreSQL and
Redis given. It is the same code and the same processes as the ``Procfile``,
not a test double.

A top-level package of the repository, not of the wheel (pyproject's package list names only
``apps`` and ``e31site``): tests import it from the repository root (pytest's rootdir), benchmarks
and ``scripts/gpu_smoke.py`` put the root on ``sys.path`` first. Moved from ``e31site/devstack.py``
(issue 13).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent


def web_command(host: str, port: int) -> list[str]:
    """The web process, as the ``Procfile`` runs it: uvicorn (HTTP bodies streamed to the app, not
    buffered whole as Daphne does, daphne#483; WebSockets through the ``websockets`` package).
    ``E31_WEB_ACCESS_LOG=1`` keeps uvicorn's access log (one line per request; benchmarks count
    calls from it). Its shutdown is bounded: :data:`WEB_GRACEFUL_S` seconds for open requests."""
    access = ["--access-log", "--log-level", "info"] if os.environ.get("E31_WEB_ACCESS_LOG") == "1" else [
        "--no-access-log", "--log-level", "warning"]
    return [sys.executable, "-m", "uvicorn", "e31site.asgi:application", "--host", host, "--port", str(port),
            "--lifespan", "off", "--ws", "websockets", "--timeout-graceful-shutdown", str(WEB_GRACEFUL_S), *access]


# Seconds a web process waits for open requests and sockets on SIGTERM before it closes them (issue 26
# item 6, as the Procfile's --timeout-graceful-shutdown): below LocalStack.stop's web_timeout, so a stop
# ends in a clean exit rather than a SIGKILL.
WEB_GRACEFUL_S = 2


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalStack:
    """Web, worker and agents as child processes.

    Args:
        database_url: PostgreSQL URL the processes share (already migrated).
        redis_url: Redis URL for the channel layer and the Celery broker; its
            database is flushed at start.
        var_dir: where uploads, bundles and agent work dirs go.
        agents: ``(node name, simulate spec)`` pairs, e.g. ``("node-a", "4xH100-80GB")``.
        web: how many uvicorn processes (each on its own port).
        beat: also run Celery beat (periodic cycles, node watch).
        split_workers: one Celery worker per queue (``core``: cycles and node watch;
            ``side``: mail), as production runs them; else one worker takes both.
        workers: how many of each worker (two or more: the scale-out shape, issue 15).
        spread_agents: agent i talks to web process ``i % web`` (else every agent to the first).
        env: extra environment for every process.
        agent_args: extra command-line arguments for every agent.
        issue_token: ``issue_token(node) -> token`` in this process (tests: the pool service on the
            same database, milliseconds); else one ``manage.py issue_node_token`` for every node,
            started beside the web processes (about 2 s of Django start-up on this machine).

    Fault drills (tests/e2e/test_faults.py): :meth:`signal_agent` (``kill -9``,
    SIGSTOP), :meth:`start_agent` (again, on the same work dir and token),
    :meth:`stop_web` / :meth:`start_web` (every web process, on the same ports).
    """

    database_url: str
    redis_url: str
    var_dir: Path
    agents: list[tuple[str, str]] = field(default_factory=lambda: [("node-a", "4xH100-80GB")])
    web: int = 1
    beat: bool = False
    split_workers: bool = False
    workers: int = 1
    spread_agents: bool = False
    env: dict[str, str] = field(default_factory=dict)
    agent_args: list[str] = field(default_factory=list)
    issue_token: Callable[[str], str] | None = None
    procs: list[subprocess.Popen] = field(default_factory=list, init=False)
    ports: list[int] = field(default_factory=list, init=False)
    named: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    tokens: dict[str, str] = field(default_factory=dict, init=False)

    @property
    def url(self) -> str:
        """Base URL of the first web process."""
        return f"http://127.0.0.1:{self.ports[0]}"

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
               "E31_VAR_DIR": str(self.var_dir), "E31_CELERY_EAGER": "0", "PYTHONUNBUFFERED": "1",
               "DJANGO_SETTINGS_MODULE": "e31site.settings", "E31_CELERY_POLL_S": "0.2", **self.env}
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        with open(self.var_dir / f"{name}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(args, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.named[name] = proc
        return proc

    def start(self, timeout: float = 60.0) -> LocalStack:
        """Start everything and wait until the web answers and every agent has registered.

        Raises:
            TimeoutError: something did not come up within ``timeout`` seconds.
            RuntimeError: a process exited while starting. Either way what was started is stopped.
        """
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()  # a stack that did not come up leaves no process behind (one held a CI run's database)
            raise

    def _start(self, timeout: float) -> LocalStack:
        import redis

        self.var_dir.mkdir(parents=True, exist_ok=True)
        redis.Redis.from_url(self.redis_url).flushdb()
        env = self._env()
        py = sys.executable
        for _ in range(self.web):
            self.ports.append(free_port())
        self._spawn_web(env)
        names = [name for name, _simulate in self.agents]
        issuing = None if self.issue_token or not names else subprocess.Popen(
            [py, "manage.py", "issue_node_token", *names], cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, text=True)
        kinds = [("worker-core", "core"), ("worker-side", "side")] if self.split_workers else [("worker", "core,side")]
        for kind, queues in kinds:
            for i in range(self.workers):
                name = kind if i == 0 else f"{kind}{i + 1}"
                self._spawn(name, [py, "-m", "celery", "-A", "e31site", "worker", "--pool=solo", "--loglevel=WARNING",
                                   "--without-heartbeat", "--without-gossip", "--without-mingle",
                                   f"--queues={queues}", f"--hostname={name}@%h"], env)
        if self.beat:
            self._spawn("beat", [py, "-m", "celery", "-A", "e31site", "beat", "--loglevel=WARNING",
                                 "--schedule", str(self.var_dir / "celerybeat-schedule")], env)
        if issuing is None:  # issue_token given, or no agents
            self.tokens = {name: self.issue_token(name) for name in names}
        else:
            out, _ = issuing.communicate(timeout=timeout)
            if issuing.returncode != 0:
                raise RuntimeError(f"manage.py issue_node_token exited with {issuing.returncode}")
            self.tokens = dict(zip(names, out.split(), strict=True))
        self._wait_web(time.monotonic() + timeout)
        for name in names:
            self.start_agent(name)
        return self

    def _spawn_web(self, env: dict[str, str]) -> None:
        for i, port in enumerate(self.ports):
            self._spawn(f"web{i}", web_command("127.0.0.1", port), env)

    def _wait_web(self, deadline: float) -> None:
        for url in self.urls:
            self._wait(lambda u=url: httpx.get(u + "/accounts/login/", timeout=2).status_code == 200, deadline)

    def start_agent(self, name: str) -> subprocess.Popen:
        """Start (or start again) the agent of node ``name``, on its work dir, with its token."""
        simulate = dict(self.agents)[name]
        index = [n for n, _ in self.agents].index(name)
        server = self.urls[index % len(self.urls)] if self.spread_agents else self.url
        workdir = self.var_dir / "agents" / name
        workdir.mkdir(parents=True, exist_ok=True)
        agent_env = {k: v for k, v in self._env().items() if not k.startswith(("DATABASE_", "REDIS_"))}
        return self._spawn(f"agent-{name}", [sys.executable, "-m", "e31_agent.cli", "--server", server,
                                             "--simulate", simulate, "--workdir", str(workdir), *self.agent_args],
                           {**agent_env, "E31_NODE_TOKEN": self.tokens[name]})

    def signal_agent(self, name: str, sig: int) -> None:
        """Send ``sig`` to node ``name``'s agent (SIGKILL: it is reaped and forgotten;
        SIGSTOP/SIGCONT: it stays, frozen or thawed)."""
        proc = self.named[f"agent-{name}"]
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait(10)
            self._forget(f"agent-{name}")

    def stop_web(self) -> None:
        """Stop every web process (SIGKILL: a server that vanishes); ports are kept."""
        for i in range(len(self.ports)):
            proc = self.named[f"web{i}"]
            proc.kill()
            proc.wait(10)
            self._forget(f"web{i}")

    def start_web(self, timeout: float = 60.0) -> None:
        """Start the uvicorn processes again, on the same ports, and wait until they answer."""
        self._spawn_web(self._env())
        self._wait_web(time.monotonic() + timeout)

    def _forget(self, name: str) -> None:
        proc = self.named.pop(name)
        self.procs.remove(proc)

    def wait_for(self, ready, timeout: float = 30.0) -> None:
        """Poll ``ready()`` every 0.1 s until true.

        Raises:
            TimeoutError: not true within ``timeout`` seconds.
            RuntimeError: a process of the stack died meanwhile.
        """
        self._wait(ready, time.monotonic() + timeout)

    def _wait(self, ready, deadline: float) -> None:
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[:4]} exited with {proc.returncode}; see {self.var_dir}/*.log")
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("the stack did not come up in time")

    def stop(self, timeout: float = 20.0, web_timeout: float = 3.0) -> None:
        """SIGTERM every process (agents first, so they stop their jobs), then SIGKILL leftovers.

        Agents and the worker get ``timeout`` seconds; uvicorn only ``web_timeout``: it waits
        for open requests (an agent's long poll lasts up to ``E31_AGENT_POLL_WAIT_S``) before
        it exits, and a web process keeps no state.
        """
        web = {id(self.named[name]) for name in self.named if name.startswith("web")}
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a frozen agent must be able to stop
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=web_timeout if id(proc) in web else timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        self.named.clear()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
