"""Issue 12 case 3, ``make run``: an agent killed with ``kill -9`` is started again by the
standalone process and takes its running job up; Ctrl-C (SIGINT to the whole process group, as a
terminal sends it) then ends the job as cancelled by the operator and stops everything, the job's
processes included (no ghost outlives it)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from devstack import BASE_DIR, free_port
from tests.e2e.test_faults import FAST, MARKER_VAR
from tests.e2e.test_standalone import manage

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def marked(job_id: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if f":{job_id}:" in proc.environ().get(MARKER_VAR, "") and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait(predicate, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def test_make_run_restarts_a_dead_agent_and_ctrl_c_leaves_nothing(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "E31_CELERY_EAGER")}
    env.update(E31_VAR_DIR=str(tmp_path / "var"), E31_PORT=str(port), E31_DEMO_PASSWORD="demo-pw-123",
               PYTHONUNBUFFERED="1", **FAST, E31_NODE_LOSS_TIMEOUT_S="30")
    manage(env, "migrate", "--noinput")
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone"], cwd=BASE_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, process_group=0)
    out = []
    try:
        while f"127.0.0.1:{port}" not in "".join(out):
            line = proc.stdout.readline()
            assert line, "".join(out)
            out.append(line)
        token = manage(env, "issue_token", "demo")
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"})
        wait(lambda: len(api.get("/api/v1/pool/").json()) >= 2, 30)
        doc = {"name": "long", "work": {"command": "sleep 300"},
               "compute": {"gpus": 2, "gpu_model": "A100", "time_limit": "10m"}}
        job_id = api.post("/api/v1/jobs/", json=doc).json()["id"]
        wait(lambda: api.get(f"/api/v1/jobs/{job_id}/").json()["state"] == "running", 30)
        agents = psutil.Process(proc.pid).children()
        assert len(agents) == 2
        node_b = next(a for a in agents if "node-b" in " ".join(a.cmdline()))
        run = marked(job_id)
        assert run
        node_b.kill()  # kill -9 of the agent that runs the job

        def restarted() -> bool:
            now = psutil.Process(proc.pid).children()
            return len(now) == 2 and node_b.pid not in {c.pid for c in now}

        wait(restarted, 20)
        # the new agent took the run up: the same processes, the job still running, one attempt
        time.sleep(3)
        job = api.get(f"/api/v1/jobs/{job_id}/").json()
        assert (job["state"], job["attempts"]) == ("running", 1), job
        assert all(p.is_running() for p in run)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
        code = proc.wait(timeout=90)
    rest = proc.stdout.read()
    assert code == 0, rest[-3000:]
    assert "agent node-b died; started it again" in "".join(out) + rest
    wait(lambda: marked(job_id) == [], 10)  # Ctrl-C left no process of the job behind
    ended = manage(env, "shell", "-c", "from apps.jobs.models import Job; "
                   f"j = Job.objects.get(pk={job_id}); print(j.state, j.outcome, j.end_reason)")
    assert ended.split()[-3:-1] == ["released", "cancelled"], ended  # stopped by the operator, not lost
    assert ended.split()[-1] != "node_lost", ended
