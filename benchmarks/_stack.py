"""Shared set-up for the benchmarks: a fresh PostgreSQL database, a user, a live stack.

Run from the repository root with the project's virtual environment, e.g.
``.venv/bin/python benchmarks/submit_rate.py``. ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/e31_bench``; dropped and re-created) and
``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/13``; flushed) say where.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/e31_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


def fresh_database() -> None:
    """Drop and re-create the benchmark database, then migrate it."""
    import psycopg

    url = urlparse(DATABASE_URL)
    name = url.path.lstrip("/")
    admin = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    manage("migrate", "--noinput", "-v0")


def env() -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "E31_CELERY_EAGER": "0",
            "E31_LOG_LEVEL": "WARNING"}


def manage(*args: str, environ: dict[str, str] | None = None) -> str:
    """Run ``manage.py`` with ``args`` (``environ``: its whole environment, default :func:`env`); its stdout."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environ or env(), check=True,
                          capture_output=True, text=True).stdout.strip()


def user_token(username: str = "bench", environ: dict[str, str] | None = None) -> str:
    manage("shell", "-c", "from django.contrib.auth.models import User; "
                          f"User.objects.get_or_create(username='{username}')", environ=environ)
    return manage("issue_token", username, environ=environ)


@contextmanager
def live_stack(agents: list[tuple[str, str]], web: int = 1, env: dict[str, str] | None = None):
    """A fresh database and a :class:`LocalStack` with ``agents`` (``env``: more environment for every
    process); yields (stack, token)."""
    import httpx

    from devstack import LocalStack

    fresh_database()
    token = user_token()
    with tempfile.TemporaryDirectory(prefix="e31-bench-") as tmp:
        stack = LocalStack(database_url=DATABASE_URL, redis_url=REDIS_URL, var_dir=Path(tmp), agents=agents,
                           web=web, env={"E31_LOG_LEVEL": "WARNING", **(env or {})})
        stack.start()
        try:
            headers = {"Authorization": f"Token {token}"}
            want = sum(int(s.split("x")[0]) for _, s in agents)
            stack.wait_for(lambda: sum(r["total"] for r in httpx.get(
                stack.url + "/api/v1/pool/", headers=headers).json()) == want, timeout=60)
            yield stack, token
        finally:
            stack.stop()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def trivial_spec(name: str = "bench", gpus: int = 1, command: str = "true", limit: str = "5m") -> dict:
    return {"name": name, "work": {"command": command}, "compute": {"gpus": gpus, "time_limit": limit}}
