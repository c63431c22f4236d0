"""Standalone mode (`make run`): one command, SQLite, two local agents; stops clean."""
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

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def manage(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_standalone_runs_a_job_and_stops_leaving_nothing_behind(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "E31_CELERY_EAGER")}
    env.update(E31_VAR_DIR=str(tmp_path / "var"), E31_PORT=str(port), E31_DEMO_PASSWORD="demo-pw-123",
               PYTHONUNBUFFERED="1")
    manage(env, "migrate", "--noinput")
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone"], cwd=BASE_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        banner = ""
        while f"127.0.0.1:{port}" not in banner:
            line = proc.stdout.readline()
            assert line, banner
            banner += line
        token = manage(env, "issue_token", "demo")
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"})
        deadline = time.monotonic() + 30
        while len(api.get("/api/v1/pool/").json()) < 2:
            assert time.monotonic() < deadline, "agents did not register"
            time.sleep(0.2)
        doc = {"name": "hello", "work": {"command": "echo $CUDA_VISIBLE_DEVICES > out.txt"},
               "compute": {"gpus": 2, "gpu_model": "A100", "time_limit": "1m"}, "output": {"paths": ["out.txt"]}}
        job_id = api.post("/api/v1/jobs/", json=doc).json()["id"]
        while (job := api.get(f"/api/v1/jobs/{job_id}/").json())["state"] != "released":
            assert time.monotonic() < deadline + 30, job
            time.sleep(0.2)
        assert job["outcome"] == "succeeded" and job["bundle"]["files"][0]["path"] == "out.txt"
        # A job still running when the site is stopped ends as an operator's cancel, outputs packed.
        long_doc = {"name": "long", "work": {"command": "echo started > partial.txt; sleep 300"},
                    "compute": {"gpus": 1, "gpu_model": "A100", "time_limit": "10m"},
                    "output": {"paths": ["partial.txt"]}}
        long_id = api.post("/api/v1/jobs/", json=long_doc).json()["id"]
        while (job := api.get(f"/api/v1/jobs/{long_id}/").json())["state"] != "running":
            assert time.monotonic() < deadline + 60, job
            time.sleep(0.2)
        assert len(psutil.Process(proc.pid).children()) == 2  # the two agents
        children = psutil.Process(proc.pid).children(recursive=True)  # and the long job's shim and command
    finally:
        # SIGTERM (a service manager's stop, `kill`); Ctrl-C's SIGINT is tests/faults/test_standalone_agents.py
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    output = proc.stdout.read()
    assert code == 0, output[-3000:]
    assert "stopping 1 running job(s)" in output
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    ended = manage(env, "shell", "-c", "from apps.jobs.models import Job; from apps.artifacts.models import Bundle; "
                   f"j = Job.objects.get(pk={long_id}); "
                   f"print(j.state, j.outcome, j.end_reason, [f['path'] for b in Bundle.objects.filter(job=j) "
                   "for f in b.files])")
    assert ended.splitlines()[-1] == "released cancelled cancelled ['partial.txt']", ended
