"""The checks of ``make lint`` fail on a planted violation (issue 22, item 3), and lint writes nothing.

Each check runs as ``make lint`` runs it (a subprocess), on a temporary copy of the code or a
temporary package with the violation planted, so the repository itself is never touched:

- the forbidden-import contracts of ``pyproject.toml`` (``lint-imports``), on a copy of ``apps``,
  ``e31site`` and the agent's, the CLI's and the protocol's packages;
- ``scripts/clock_check.py``: a wall-clock read outside ``apps.core.clock``;
- ``scripts/import_cycles.py``: an import cycle in a package;
- the settings under ``E31_LINT=1`` (what ``make lint`` sets): no ``var/`` is made.

No database is needed.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
LINT_IMPORTS = str(Path(PY).with_name("lint-imports"))
PACKAGES = {"apps": ROOT / "apps", "e31site": ROOT / "e31site", "e31_agent": ROOT / "agent" / "e31_agent",
            "e31_cli": ROOT / "cli" / "e31_cli", "e31_protocol": ROOT / "protocol" / "e31_protocol"}


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _load(script: str):
    spec = importlib.util.spec_from_file_location(script, ROOT / "scripts" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the forbidden-import contracts (pyproject.toml [tool.importlinter]) ------------------------
@pytest.fixture
def code_copy(tmp_path: Path) -> Path:
    """A copy of the packages import-linter checks and of ``pyproject.toml``, in which to plant
    imports; ``lint-imports`` run there reads the copy (its directory comes first on ``sys.path``)."""
    for name, source in PACKAGES.items():
        shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    return _run([LINT_IMPORTS, "--config", "pyproject.toml", "--no-cache"], where)


def _plant(where: Path, module: str, source: str) -> None:
    path = where.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(source)


def test_it_keeps_the_contracts_on_the_code_as_it_is(code_copy):
    result = _lint_imports(code_copy)
    assert result.returncode == 0, result.stdout
    assert "0 broken" in result.stdout


def test_it_refuses_metering_models_in_the_wire_the_pages_and_the_notices(code_copy):
    planted = {"apps.agent_api.planted": "from apps.metering.models import Lease\n",
               "apps.web.planted": "from apps.metering import models\n",
               "apps.live.planted": "import apps.metering.models\n",
               "apps.notices.planted": "def f():\n    from apps.metering.models import BudgetAlert\n"}
    for module, source in planted.items():
        _plant(code_copy, module, source)
    _plant(code_copy, "apps.web.through_selectors", "from apps.metering.selectors import job_money\n")

    result = _lint_imports(code_copy)

    assert result.returncode == 1
    assert "Agent API, web, live, notices and hooks import no metering models BROKEN" in result.stdout
    for module in planted:
        assert f"{module} -> apps.metering.models" in result.stdout
    assert "through_selectors" not in result.stdout  # reaching the models through a selector is the way


def test_it_refuses_django_in_the_agent_the_cli_the_protocol_and_the_scheduling_core(code_copy):
    planted = {"e31_agent.planted": ("import django\n", "django"),
               "e31_cli.planted": ("from rest_framework import serializers\n", "rest_framework"),
               "e31_protocol.planted": ("from channels.layers import get_channel_layer\n", "channels"),
               "apps.scheduling.core.planted": ("from celery import shared_task\n", "celery"),
               "apps.scheduling.simulator.planted": ("from django.utils import timezone\n", "django")}
    for module, (source, _) in planted.items():
        _plant(code_copy, module, source)
    # Indirect: through a module of apps that imports Django itself.
    _plant(code_copy, "apps.scheduling.core.through_clock", "from apps.core import clock\n")

    result = _lint_imports(code_copy)

    assert result.returncode == 1
    assert "Agent, CLI, protocol, scheduling core and simulator import no Django BROKEN" in result.stdout
    for module, (_, forbidden) in planted.items():
        assert f"{module} -> {forbidden}" in result.stdout
    assert "apps.scheduling.core.through_clock -> apps.core.clock" in result.stdout


# --- scripts/clock_check.py ----------------------------------------------------------------------
def test_it_refuses_a_planted_timezone_now(tmp_path):
    module = tmp_path / "apps" / "jobs" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text("from django.utils import timezone\n\n\ndef stamp():\n    return timezone.now()\n")

    result = _run([PY, str(ROOT / "scripts" / "clock_check.py"), str(tmp_path / "apps")], tmp_path)

    assert result.returncode == 1
    assert f"{module}:5: django.utils.timezone.now reads the wall clock" in result.stdout


def test_it_passes_the_apps_as_they_are():
    result = _run([PY, str(ROOT / "scripts" / "clock_check.py")], ROOT)
    assert result.returncode == 0, result.stdout
    assert "no clock read outside apps.core.clock" in result.stdout


def test_it_sees_every_wall_clock_however_imported():
    check = _load("clock_check")
    source = "\n".join([
        "import datetime",
        "import datetime as dt",
        "from datetime import date",
        "from datetime import datetime as DateTime",
        "from django.utils import timezone",
        "from django.utils.timezone import now as tz_now",
        "from apps.core import clock",
        "a = datetime.datetime.now()",
        "b = dt.datetime.utcnow()",
        "c = date.today()",
        "d = DateTime.now(tz=None)",
        "e = tz_now()",
        "f = models.DateTimeField(default=timezone.now)",
        "g = timezone.localdate()",
        "h = clock.now()",
        "i = timezone.localtime(h)",
        "j = DateTime.fromisoformat('2025-06-02')",
    ])
    assert check.clock_reads(source) == [
        (8, "datetime.datetime.now"), (9, "datetime.datetime.utcnow"), (10, "datetime.date.today"),
        (11, "datetime.datetime.now"), (12, "django.utils.timezone.now"), (13, "django.utils.timezone.now"),
        (14, "django.utils.timezone.localdate()"),
    ]


def test_it_exempts_the_clock_itself_and_migrations(tmp_path):
    check = _load("clock_check")
    migration = tmp_path / "apps" / "jobs" / "migrations" / "0001_initial.py"
    migration.parent.mkdir(parents=True)
    migration.write_text("from django.utils import timezone\nDEFAULT = timezone.now\n")
    assert check.main([str(ROOT / "apps" / "core" / "clock.py"), str(tmp_path / "apps")]) == 0


def test_it_fails_an_allowlisted_file_that_reads_no_clock_any_more(tmp_path, monkeypatch, capsys):
    check = _load("clock_check")
    converted = tmp_path / "converted.py"
    converted.write_text("from apps.core import clock\n\nNOW = clock.now()\n")
    monkeypatch.setattr(check, "ALLOWED", frozenset({converted.as_posix()}))

    assert check.main([str(converted)]) == 1
    assert "reads no clock any more: take it out of ALLOWED" in capsys.readouterr().out


# --- scripts/import_cycles.py --------------------------------------------------------------------
def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, source in modules.items():
        (root / name / f"{module}.py").write_text(source)


def _cycles(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    return _run([PY, str(ROOT / "scripts" / "import_cycles.py"), "--package", name, "--root", str(root)], root)


def test_it_refuses_a_planted_import_cycle(tmp_path):
    _package(tmp_path, "planted", {"a": "from planted import b\n", "b": "from planted import c\n",
                                   "c": "def later():\n    from planted import a\n",  # hidden in a function
                                   "d": "from planted import a\n"})

    result = _cycles(tmp_path, "planted")

    assert result.returncode == 1
    assert "import cycle of 3 modules: planted.a, planted.b, planted.c" in result.stdout
    assert "planted.a -> planted.b -> planted.c -> planted.a" in result.stdout


def test_it_passes_a_package_without_a_cycle(tmp_path):
    _package(tmp_path, "acyclic", {"a": "from acyclic import b\n", "b": "import os\n"})

    result = _cycles(tmp_path, "acyclic")

    assert result.returncode == 0, result.stdout
    assert "no import cycle among 3 acyclic.* modules" in result.stdout


# --- make lint writes nothing (E31_LINT=1) -------------------------------------------------------
def _settings_env(var: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL", "E31_LINT")}
    return {**env, "E31_VAR_DIR": str(var), "DJANGO_SETTINGS_MODULE": "e31site.settings", **extra}


def test_it_lints_the_migrations_without_writing_a_file(tmp_path):
    var = tmp_path / "var"

    result = _run([PY, "manage.py", "makemigrations", "--check", "--dry-run"], ROOT,
                  _settings_env(var, E31_LINT="1"))

    assert result.returncode == 0, result.stderr
    assert "No changes detected" in result.stdout
    assert not var.exists()


def test_it_still_makes_and_keeps_a_key_where_it_serves(tmp_path):
    var = tmp_path / "var"
    read_key = [PY, "-c", "from django.conf import settings; print(settings.SECRET_KEY)"]

    first, second = (_run(read_key, ROOT, _settings_env(var)) for _ in range(2))

    assert first.returncode == 0, first.stderr
    assert (var / "secret_key").read_text().strip() == first.stdout.strip() == second.stdout.strip()
    assert (var / "secret_key").stat().st_mode & 0o777 == 0o600
