"""Start the production shape on one machine, as child processes: for end-to-end
tests and benchmarks.

:class:`LocalStack` runs N Daphne web processes, a Celery worker, optionally
Celery beat, and agents with simulated GPUs, all against the PostgreSQL and
Redis given. It is the same code and the same processes as the ``Procfile``,
not a test double.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent


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
        web: how many Daphne processes (each on its own port).
        beat: also run Celery beat (periodic cycles, node watch).
        env: extra environment for every process.
    """

    database_url: str
    redis_url: str
    var_dir: Path
    agents: list[tuple[str, str]] = field(default_factory=lambda: [("node-a", "4xH100-80GB")])
    web: int = 1
    beat: bool = False
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list, init=False)
    ports: list[int] = field(default_factory=list, init=False)

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
               "DJANGO_SETTINGS_MODULE": "e31site.settings", **self.env}
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.var_dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the child
        proc = subprocess.Popen(args, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 60.0) -> LocalStack:
        """Start everything and wait until the web answers and every agent has registered.

        Raises:
            TimeoutError: something did not come up within ``timeout`` seconds.
        """
        import redis

        self.var_dir.mkdir(parents=True, exist_ok=True)
        redis.Redis.from_url(self.redis_url).flushdb()
        env = self._env()
        py = sys.executable
        for i in range(self.web):
            port = free_port()
            self.ports.append(port)
            self._spawn(f"web{i}", [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                    "e31site.asgi:application"], env)
        self._spawn("worker", [py, "-m", "celery", "-A", "e31site", "worker", "--pool=solo",
                               "--loglevel=WARNING", "--without-heartbeat", "--without-gossip",
                               "--without-mingle"], env)
        if self.beat:
            self._spawn("beat", [py, "-m", "celery", "-A", "e31site", "beat", "--loglevel=WARNING",
                                 "--schedule", str(self.var_dir / "celerybeat-schedule")], env)
        deadline = time.monotonic() + timeout
        for url in self.urls:
            self._wait(lambda u=url: httpx.get(u + "/accounts/login/", timeout=2).status_code == 200, deadline)
        agent_env = {k: v for k, v in env.items() if not k.startswith(("DATABASE_", "REDIS_"))}
        for name, simulate in self.agents:
            token = subprocess.run([py, "manage.py", "issue_node_token", name], cwd=BASE_DIR, env=env,
                                   check=True, capture_output=True, text=True).stdout.strip()
            workdir = self.var_dir / "agents" / name
            workdir.mkdir(parents=True, exist_ok=True)
            self._spawn(f"agent-{name}", [py, "-m", "e31_agent.cli", "--server", self.url, "--simulate", simulate,
                                          "--workdir", str(workdir)], {**agent_env, "E31_NODE_TOKEN": token})
        return self

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

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every process (agents first, so they stop their jobs), then SIGKILL leftovers."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
