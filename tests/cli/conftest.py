"""The ``e31`` command line against one live stack per module (uvicorn, a Celery worker and two
agents with simulated GPUs, as tests/e2e), run as the installed console script."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from apps.pool.models import Gpu
from devstack import LocalStack
from tests.e2e.conftest import E2E_REDIS_DB, database_url, node_token
from tests.factories import flush_database

E31 = str(Path(sys.executable).with_name("e31"))  # the console script `make` installs (-e ./cli)


@dataclass
class Live:
    """A running stack and two accounts' tokens; :meth:`e31` runs the command line against it."""

    url: str
    token: str
    stranger_token: str
    config_dir: Path
    stack: LocalStack
    env: dict[str, str] = field(default_factory=dict)

    def e31(self, *args: str, token: str | None = None, url: str | None = None, timeout: float = 120,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``e31 ARGS`` to its end; stdout and stderr as text."""
        return subprocess.run([E31, *args], env=self.environ(token=token, url=url), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)

    def popen(self, *args: str, token: str | None = None) -> subprocess.Popen[str]:
        """Start ``e31 ARGS`` (stdout and stderr piped, line buffered)."""
        return subprocess.Popen([E31, *args], env=self.environ(token=token), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, bufsize=1)

    def environ(self, *, token: str | None = None, url: str | None = None) -> dict[str, str]:
        """A clean environment: this stack's URL and token (``""``: not set), a config dir of its own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("E31_")}
        env.update({"E31_URL": self.url if url is None else url, "E31_TOKEN": self.token if token is None else token,
                    "E31_CONFIG_DIR": str(self.config_dir), "COLUMNS": "200"})
        return {k: v for k, v in env.items() if v != "" or not k.startswith("E31_")}


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    """One started stack for the whole module (starting one takes ~10 s on this machine); after
    it, ``manage.py meter_check`` must pass and the test database is emptied again."""
    from tests.factories import UserFactory

    with django_db_blocker.unblock():
        if connection.vendor != "postgresql" or not settings.REDIS_URL:
            pytest.fail("CLI tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
        from apps.tokens.services import token_issue

        tmp = tmp_path_factory.mktemp("cli")
        redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}"
        stack = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp / "var",
                           agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB")],
                           env={"E31_GRACE_S": "2"}, issue_token=node_token)
        try:
            stack.start()
            stack.wait_for(lambda: Gpu.objects.count() == 6, timeout=30)
            user, stranger = UserFactory(username="cli-user"), UserFactory(username="cli-stranger")
            yield Live(url=stack.url, token=token_issue(user=user), stranger_token=token_issue(user=stranger),
                       config_dir=tmp / "config", stack=stack)
        finally:
            stack.stop()
            try:
                err = io.StringIO()
                call_command("meter_check", stdout=io.StringIO(), stderr=err)
            except CommandError as exc:
                pytest.fail(f"meter_check after the CLI tests: {exc}\n{err.getvalue()}")
            finally:
                flush_database()


@pytest.fixture
def fake_api(monkeypatch, tmp_path):
    """A :class:`tests.cli.fake_api.FakeApi` every command of the test talks to, with a config dir
    of its own (no live stack)."""
    from tests.cli.fake_api import FakeApi

    monkeypatch.setenv("E31_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")  # CI's shell may say 80: tables must not wrap by chance
    fake = FakeApi()
    fake.install(monkeypatch)
    return fake
