"""The sandbox when the agent is not root: a user namespace instead of slot users (issue 11, item 1).

A real agent (``python -m e31_agent.cli``) runs as an unprivileged uid that
has no ``/etc/passwd`` entry (``setpriv --reuid --regid --clear-groups``),
with a work dir and token file that uid owns, against the fake server of
tests/agent. It runs :mod:`probe` as a job with ``network: egress`` and the
job must be sealed as on a root agent: not root and no capability, none of
the agent's files outside its own job dir (token file, cache, run state,
logs, other job dirs), no sight or signal of the agent's process or its
environment, its own PID namespace, none of this host's ports (the fake
server's included); and it can read its input, write its output and reach
the stand-in outside server of :mod:`tests.security.test_sandbox`.

The agent runs on this interpreter's install when that uid may execute it,
else on the system's Python of the same version (the venv of a root
checkout often lies under ``/root``, closed to other users), with the
venv's ``site-packages``, ``agent/`` and ``protocol/`` on ``PYTHONPATH``.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.agent.fake_server import TOKEN, FakeServer
from tests.security.test_sandbox import (
    DENIED_ROUTES,
    OUTSIDE_BODY,
    PROBE,
    forbidden_tcp,
    outside_server,
    unreachable_routes,
)

pytestmark = [pytest.mark.timeout(120)]

AGENT_UID = 2309000  # below the slot range (2310000-2319999); no passwd entry
ROOT = Path(__file__).resolve().parents[2]


def _as_agent_user(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", "--clear-groups", *argv]


def _python_for_agent_user(env: dict[str, str]) -> str:
    """An interpreter the unprivileged uid can run that imports the agent (see the module doc)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    # the install must be readable too: the sandbox binds it for the job's ``python``
    check = ("import os, sys, httpx, psutil, e31_agent.cli\n"
             "for p in (sys.base_prefix + '/lib', os.path.dirname(os.path.realpath(sys.executable))):\n"
             "    assert os.access(p, os.R_OK | os.X_OK), p")
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if not os.path.exists(candidate):
            continue
        done = subprocess.run(_as_agent_user(candidate, "-c", check), env=env,
                              capture_output=True, cwd="/")
        if done.returncode == 0:
            return candidate
    pytest.fail(f"no Python {version} that uid {AGENT_UID} may run imports the agent (PYTHONPATH={env['PYTHONPATH']})")


def _bundle(server: FakeServer, job_id: int) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bytes(server.state.bundles[(job_id, 1)]))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _assignment(job_id: int, orders: dict, *, network: str = "egress") -> dict:
    return {
        "job_id": job_id, "attempt": 1, "lease_id": 100 + job_id, "gpus": [{"index": 0, "uuid": "GPU-0"}],
        "time_limit_s": 60, "deadline_in_s": 59.5, "grace_s": 1,
        "env": {"E31_JOB_ID": str(job_id), "E31_NODE_RANK": "0", "E31_NUM_NODES": "1", "E31_MASTER_ADDR": "localhost"},
        "spec": {"name": f"probe-{job_id}",
                 "work": {"command": "python3 probe.py", "image": None, "kind": "other", "network": network,
                          "env": {"PROBE_CONFIG": json.dumps(orders)}},
                 "data": [{"source": "upload:probe", "target": "probe.py", "sha256": None, "extract": False},
                          {"source": "upload:input", "target": "input.bin", "sha256": None, "extract": False}],
                 "compute": {"gpus": 1, "nodes": 1, "time_limit": 60}, "output": {"paths": ["result.json"]}},
    }  # fmt: skip


def test_a_non_root_agent_seals_its_job_in_a_user_namespace(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test needs root: to start the agent as another uid, and for the stand-in outside server")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to start the agent as an unprivileged uid")
    base = Path(tempfile.mkdtemp(prefix="e31-userns-agent-", dir="/tmp"))  # tmp_path's parents are root's alone
    agent = None
    try:
        os.chown(base, AGENT_UID, AGENT_UID)
        base.chmod(0o700)
        workdir = base / "w"
        token_file = base / "token"
        token_file.write_text(TOKEN)
        os.chown(token_file, AGENT_UID, AGENT_UID)
        token_file.chmod(0o600)
        site = sysconfig.get_paths()["purelib"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(base), "LANG": "C.UTF-8",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "agent"), str(ROOT / "protocol"), site]),
               "PYTHONDONTWRITEBYTECODE": "1",
               "E31_NODE_TOKEN": TOKEN}  # in its environ too: the job must not read /proc/<agent>/environ
        python = _python_for_agent_user(env)
        secret_input = os.urandom(2048)
        with FakeServer() as server, outside_server(tmp_path) as outside_url:
            server.state.uploads["probe"] = ("probe.py", PROBE)
            server.state.uploads["input"] = ("input.bin", secret_input)
            log = open(base / "agent.out", "wb")  # noqa: SIM115 - closed below
            agent = subprocess.Popen(_as_agent_user(python, "-m", "e31_agent.cli", "--server", server.url,
                                                    "--token-file", str(token_file), "--simulate", "1xL4-24GB",
                                                    "--workdir", str(workdir)),
                                     env=env, cwd="/", stdout=log, stderr=subprocess.STDOUT)
            log.close()
            assert server.state.wait_for(lambda: server.state.inventory is not None, 30), \
                (base / "agent.out").read_text()
            assert server.state.inventory["sandboxed"] is True
            port = int(server.url.rsplit(":", 1)[1])
            # a job dir of another job, as the agent would have it, and the agent's own files
            other = workdir / "jobs" / "999"
            other.mkdir(parents=True)
            (other / "private.txt").write_text("another tenant's file\n")
            os.chown(other, AGENT_UID, AGENT_UID)
            os.chown(other / "private.txt", AGENT_UID, AGENT_UID)
            orders = {
                "forbidden_paths": [str(base), str(token_file), str(workdir), str(other), str(other / "private.txt"),
                                    *[str(workdir / d) for d in ("cache", "runs", "logs", "bundles", "tmp", "jobs")],
                                    str(ROOT / "manage.py"), f"/proc/{agent.pid}/environ"],
                "forbidden_pids": [agent.pid, os.getpid()],
                "forbidden_tcp": forbidden_tcp(port), "allowed_url": outside_url, "input": "input.bin",
            }
            with server.state.lock:
                server.state.assignments.append(_assignment(41, orders))
                server.state.lock.notify_all()
            done = server.state.wait_for(lambda: "finished" in server.state.types(41), 60)
            assert done, (server.state.types(41), (base / "agent.out").read_text()[-3000:])
            result = json.loads(_bundle(server, 41)["result.json"])
            reports = server.state.reports[41]
            exited = [r for r in reports if r["type"] == "exited"] + [r["exited"] for r in reports if "exited" in r]
            assert [e["exit_code"] for e in exited] == [0], reports
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(30)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        shutil.rmtree(base, ignore_errors=True)

    # its own uid inside a user namespace: the agent's, never root, nothing to regain
    assert result["uid"] == result["euid"] == AGENT_UID != 0, result["uid"]
    assert int(result["cap_eff"], 16) == 0 and int(result["cap_bnd"], 16) == 0, result["cap_eff"]
    assert result["no_new_privs"] == "1"
    # nothing of the agent's outside its job dir; the agent cannot be seen, read or signalled
    assert result["leaks"] == {}, result["leaks"]
    # its own PID namespace: only the sandbox's init, the shell and the probe
    assert len(result["visible_processes"]) <= 4, result["visible_processes"]
    assert not any("e31_agent" in cmd for _, cmd in result["visible_processes"].values()), result["visible_processes"]
    assert not any(v == TOKEN for v in result["env"].values())
    # it read its input, wrote its output (result.json came back), and egress reaches the outside only
    assert result["input_sha256"] == hashlib.sha256(secret_input).hexdigest()
    assert result.get("allowed_url") == OUTSIDE_BODY, result.get("allowed_url_error")
    assert set(DENIED_ROUTES) <= unreachable_routes(result["routes"]), result["routes"]
