"""A hostile tenant against the job sandbox on ``make run``'s shape (issue 11, "Done when").

``manage.py standalone`` (uvicorn, SQLite, the in-memory channel layer and its
two built-in agents, all as root, as ``make run`` starts them) in a var dir
of its own, on a free port. Two users each run :mod:`probe` as a job at the
same time (bob's lingers as alice's target); neither may be root, read the
site's ``var/`` (the secret key, the demo password, the SQLite database,
media, the agents' work dirs and caches), the other's job dir or uploads,
``/proc/<agent>/environ``, or see or signal the other's job, the agents or
the server; with ``network: egress`` neither reaches the server's port,
PostgreSQL or Redis on this host; both read their input, write their output
and fetch from the stand-in outside server of :mod:`tests.security.test_sandbox`.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from devstack import BASE_DIR, free_port
from tests.e2e.test_five_steps import wait_released
from tests.security.test_sandbox import (
    DENIED_ROUTES,
    OUTSIDE_BODY,
    PROBE,
    assert_sealed,
    bundle,
    forbidden_tcp,
    job_processes,
    outside_server,
    submit,
    unreachable_routes,
    upload,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

USERS = """
from django.contrib.auth import get_user_model
from apps.tokens.services import token_issue
for name in ("alice", "bob"):
    user, _ = get_user_model().objects.get_or_create(username=name)
    print("token", name, token_issue(user=user))
"""


def manage(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_two_tenants_probe_their_sandboxes_on_the_standalone_server(tmp_path):
    port = free_port()
    var = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "E31_CELERY_EAGER")}
    env.update(E31_VAR_DIR=str(var), E31_PORT=str(port), E31_DEMO_PASSWORD="", PYTHONUNBUFFERED="1",
               E31_LOG_LEVEL="WARNING")
    manage(env, "migrate", "--noinput", "-v0")
    tokens = dict(line.split()[1:] for line in manage(env, "shell", "-c", USERS).splitlines()
                  if line.startswith("token "))
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone"], cwd=BASE_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    a_api, b_api = (httpx.Client(base_url=url, headers={"Authorization": f"Token {tokens[n]}"}, timeout=30)
                    for n in ("alice", "bob"))
    secret_input = os.urandom(4096)
    try:
        banner = ""
        while f"127.0.0.1:{port}" not in banner:
            line = proc.stdout.readline()
            assert line, banner
            banner += line
        wait(lambda: len(a_api.get("/api/v1/pool/").json()) >= 2, 60, "the agents to register")
        agents = [c.pid for c in psutil.Process(proc.pid).children()]
        assert len(agents) == 2 and os.geteuid() == 0  # make run's agents run as the user who ran it: here root
        with outside_server(tmp_path) as outside_url:
            a_probe, b_probe = upload(a_api, "probe.py", PROBE), upload(b_api, "probe.py", PROBE)
            a_input, b_input = upload(a_api, "a.bin", secret_input), upload(b_api, "b.bin", b"bob's private data")
            b_uploads = [p for p in (var / "media").rglob("*")
                         if p.is_file() and p.read_bytes() == b"bob's private data"]
            assert b_uploads, "bob's upload is not under var/media"
            agent_dirs = sorted((var / "agents").iterdir())
            assert len(agent_dirs) >= 2
            common = {
                "forbidden_tcp": forbidden_tcp(port), "allowed_url": outside_url, "input": "input.bin",
                "forbidden_paths": [
                    str(var), str(var / "secret_key"), str(var / "demo_password"), str(var / "e31.sqlite3"),
                    str(var / "media"), *map(str, b_uploads), str(var / "agents"),
                    *[str(d / sub) for d in agent_dirs for sub in ("", "cache", "runs", "logs", "bundles", "tmp",
                                                                    "jobs", "agent.log")],
                    str(Path(BASE_DIR) / "manage.py"), str(Path(BASE_DIR) / "var"), "/run/e31-agent",
                    *[f"/proc/{pid}/environ" for pid in (*agents, proc.pid)],
                ],
                "forbidden_pids": [*agents, proc.pid, os.getpid()],
            }
            bob_job = submit(b_api, name="bob-probe", probe_id=b_probe, input_id=b_input,
                             orders={**common, "linger_s": 15}, outputs=("result.json", "survived.txt"))
            bob_dir = wait(lambda: next((p for p in var.glob(f"agents/*/jobs/{bob_job}")
                                         if (p / "result.json").exists()), None), 90, "bob's probe to run")
            bob_pids = [p.pid for p in job_processes(bob_job)]
            assert bob_pids, "bob's job has no processes"
            alice_job = submit(a_api, name="alice-probe", probe_id=a_probe, input_id=a_input, orders={
                **common,
                "forbidden_paths": [*common["forbidden_paths"], str(bob_dir), str(bob_dir / "input.bin"),
                                    str(bob_dir / "result.json")],
                "forbidden_pids": [*common["forbidden_pids"], *bob_pids]})
            alice_done = wait_released(a_api, [alice_job], timeout=90)[alice_job]
            bob_done = wait_released(b_api, [bob_job], timeout=60)[bob_job]
        assert alice_done["exit_code"] == 0 and bob_done["exit_code"] == 0, (alice_done, bob_done)
        alice = json.loads(bundle(a_api, alice_job)["result.json"])
        bob_files = bundle(b_api, bob_job)
        secrets = {(var / "secret_key").read_text().strip(), (var / "demo_password").read_text().strip(),
                   *tokens.values()}
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stdout.read()[-3000:]

    bob = json.loads(bob_files["result.json"])
    assert bob_files["survived.txt"] == b"survived\n"  # alice's probe could not stop or kill it
    for who, res in (("alice", alice), ("bob", bob)):
        assert_sealed(who, res, secrets)
        assert res.get("allowed_url") == OUTSIDE_BODY, (who, res.get("allowed_url_error"))
        # egress: the metadata range and the private networks are unreachable routes
        assert set(DENIED_ROUTES) <= unreachable_routes(res["routes"]), (who, res["routes"])
    assert alice["uid"] != bob["uid"]
    assert alice["input_sha256"] == hashlib.sha256(secret_input).hexdigest()
    assert bob["input_sha256"] == hashlib.sha256(b"bob's private data").hexdigest()
