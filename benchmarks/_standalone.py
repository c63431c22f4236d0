"""The ``make run`` shape for the benchmarks: ``manage.py standalone`` on SQLite in a temporary var dir.

:func:`standalone_stack` starts the standalone server exactly as ``make run`` does
(``migrate``, then ``manage.py standalone``: uvicorn, eager tasks, the in-process
beat and its two built-in agents), on a free port with its own ``E31_VAR_DIR``
and no ``DATABASE_URL``/``REDIS_URL`` (so SQLite and the in-memory channel layer).
The benchmark's own agents (e.g. one ``8xH100-80GB``) are started next to it with
node tokens from ``manage.py issue_node_token``, and the built-in agents' nodes are
drained, so jobs run only on the benchmark's nodes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _stack import ROOT, manage, user_token


def standalone_env(var_dir: Path) -> dict[str, str]:
    """The environment of ``make run`` with its var dir at ``var_dir``: no PostgreSQL, Redis or Celery settings."""
    drop = ("DATABASE_URL", "REDIS_URL", "E31_CELERY_EAGER", "E31_PORT")
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    return {**environ, "E31_VAR_DIR": str(var_dir), "E31_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1",
            "E31_DEMO_PASSWORD": "bench-demo"}


def _gpus(simulate: str) -> int:
    return int(simulate.split("x", 1)[0])


@dataclass
class Standalone:
    """A running ``manage.py standalone`` and the benchmark's extra agents."""

    var_dir: Path
    port: int
    environ: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def urls(self) -> list[str]:
        return [self.url]

    def manage(self, *args: str) -> str:
        """``manage.py`` against this server's SQLite database; its stdout."""
        return manage(*args, environ=self.environ)


@contextmanager
def standalone_stack(agents: list[tuple[str, str]], timeout: float = 120.0):
    """Start ``make run``'s server plus ``agents`` (``(name, simulate)``); yields (server, user token).

    Every node that is not one of ``agents`` (the built-in ones) is drained once it has registered.

    Raises:
        TimeoutError: the server or the agents did not come up within ``timeout`` seconds.
        RuntimeError: the server exited while starting.
    """
    from devstack import free_port

    with tempfile.TemporaryDirectory(prefix="e31-bench-standalone-") as tmp:
        var_dir = Path(tmp)
        server = Standalone(var_dir=var_dir, port=free_port(), environ=standalone_env(var_dir))
        server.manage("migrate", "--noinput", "-v0")
        token = user_token(environ=server.environ)
        log = open(var_dir / "standalone.log", "ab")  # noqa: SIM115 - lives as long as the child
        web = subprocess.Popen([sys.executable, "manage.py", "standalone", "--port", str(server.port)], cwd=ROOT,
                               env=server.environ, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            _wait(lambda: httpx.get(server.url + "/accounts/login/", timeout=2).status_code == 200, deadline, web)
            agent_env = {k: v for k, v in server.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
            for name, simulate in agents:
                node_token = server.manage("issue_node_token", name)
                workdir = var_dir / "bench-agents" / name
                workdir.mkdir(parents=True)
                alog = open(workdir / "agent.log", "ab")  # noqa: SIM115
                server.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "e31_agent.cli", "--server", server.url, "--simulate", simulate,
                     "--workdir", str(workdir)], cwd=ROOT, env={**agent_env, "E31_NODE_TOKEN": node_token},
                    stdout=alog, stderr=subprocess.STDOUT))
            from e31site.standalone import DEFAULT_AGENTS

            want = sum(_gpus(s) for _, s in agents) + sum(_gpus(a.simulate) for a in DEFAULT_AGENTS)
            headers = {"Authorization": f"Token {token}"}
            _wait(lambda: sum(r["total"] for r in httpx.get(server.url + "/api/v1/pool/", headers=headers,
                                                            timeout=5).json()) >= want, deadline, web)
            mine = [name for name, _ in agents]
            server.manage("shell", "-c", "from apps.pool.models import Node; "
                                         "from apps.pool.services import node_set_drain; "
                                         f"[node_set_drain(node=n, drain=True) for n in Node.objects.exclude("
                                         f"name__in={mine!r})]")
            yield server, token
        finally:
            for proc in server.procs:
                proc.send_signal(signal.SIGTERM)
            for proc in server.procs:
                _reap(proc, 20)
            web.send_signal(signal.SIGINT)  # Ctrl-C: it stops its own agents, then exits
            _reap(web, 60)


def _wait(ready, deadline: float, proc: subprocess.Popen) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"manage.py standalone exited with {proc.returncode}")
        try:
            if ready():
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError("the standalone server did not come up in time")


def _reap(proc: subprocess.Popen, timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
