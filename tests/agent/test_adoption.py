"""Surviving the agent: a real agent process killed mid-job, and the next one on its work dir.

The job runs on under its shim; the restarted agent takes it up again
(supervision, the rest of the log, the bundle, ``finished``) or, when the
job died with the host's processes, leaves it out of its heartbeats so the
server requeues it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from e31_agent.models import JobRef
from e31_agent.reports import Reporter, Spool
from e31_agent.shim import set_child_subreaper

from .fake_server import TOKEN, FakeServer
from .test_agent import assignment, job_processes, offer

pytestmark = pytest.mark.timeout(90)


def start_agent(server: FakeServer, workdir: Path) -> subprocess.Popen:
    env = {**os.environ, "E31_NODE_TOKEN": TOKEN}
    return subprocess.Popen(
        [sys.executable, "-m", "e31_agent.cli", "--server", server.url, "--simulate", "1xH100-80GB",
         "--workdir", str(workdir), "--log-level", "DEBUG"],
        env=env, stdout=open(workdir.parent / "agent.log", "ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(20)


COUNTING = "for i in $(seq 1 30); do echo line $i; sleep 0.1; done; echo done > out.txt"
FULL_LOG = b"".join(b"line %d\n" % i for i in range(1, 31))


def test_a_restarted_agent_takes_up_the_running_job(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        first = start_agent(server, workdir)
        try:
            offer(server, assignment(5, COUNTING, outputs=["out.txt"]))
            assert server.state.wait_for(lambda: len(server.state.logs[(5, 1)]) >= 14, 20)
            kill9(first)
            log_at_kill = len(server.state.logs[(5, 1)])
            with server.state.lock:
                server.state.running = [{"job_id": 5, "attempt": 1}]
            time.sleep(0.5)  # the job runs on without its agent
            assert job_processes(workdir), "the job died with its agent"
            second = start_agent(server, workdir)
            try:
                assert server.state.wait_for(lambda: "finished" in server.state.types(5), 30)
                assert server.state.wait_for(lambda: not (workdir / "runs" / "5-1").exists(), 10)
            finally:
                stop(second)
        finally:
            stop(first)
    reports = server.state.reports[5]
    assert [r["type"] for r in reports] == ["running", "exited", "finished"]  # nothing staged: no accepted
    assert [r["seq"] for r in reports] == [1, 2, 3]
    assert (reports[1]["reason"], reports[1]["exit_code"]) == ("exit", 0)
    assert log_at_kill < len(FULL_LOG)
    assert bytes(server.state.logs[(5, 1)]) == FULL_LOG
    assert (5, 1) in server.state.completed
    assert job_processes(workdir) == []


def test_a_job_that_ended_while_no_agent_ran_is_reported(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        first = start_agent(server, workdir)
        try:
            offer(server, assignment(6, "echo before; sleep 1; echo after; exit 4"))
            assert server.state.wait_for(lambda: bytes(server.state.logs[(6, 1)]) == b"before\n", 20)
            kill9(first)
            time.sleep(1.5)  # the command ends meanwhile; its shim records how
            assert json.loads((workdir / "runs" / "6-1" / "exit.json").read_text()) == {"exit_code": 4}
            with server.state.lock:
                server.state.running = [{"job_id": 6, "attempt": 1}]
            second = start_agent(server, workdir)
            try:
                assert server.state.wait_for(lambda: "finished" in server.state.types(6), 30)
            finally:
                stop(second)
        finally:
            stop(first)
    reports = server.state.reports[6]
    assert [r["type"] for r in reports] == ["running", "finished"]  # nothing staged nor declared: folded
    exited = dict(reports[1]["exited"])
    assert exited.pop("elapsed_s") > 0  # the run's length from the accept, as this agent measured it
    assert exited == {"exit_code": 4, "reason": "exit"}
    assert bytes(server.state.logs[(6, 1)]) == b"before\nafter\n"


def test_an_upload_cut_by_an_agent_restart_resumes_with_the_same_archive(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        with server.state.lock:
            server.state.bundle_puts_left = 1  # the first 32 MiB chunk lands, then the network goes
        first = start_agent(server, workdir)
        try:
            offer(server, assignment(12, "head -c 40000000 /dev/urandom > big.bin", outputs=["big.bin"]))
            assert server.state.wait_for(lambda: len(server.state.bundles[(12, 1)]) > 0, 30)
            time.sleep(0.5)  # the second chunk is being retried
            kill9(first)
            packed = json.loads((workdir / "runs" / "12-1" / "bundle.json").read_text())
            with server.state.lock:
                server.state.bundle_puts_left = None
                server.state.running = [{"job_id": 12, "attempt": 1}]
            second = start_agent(server, workdir)
            try:
                assert server.state.wait_for(lambda: "finished" in server.state.types(12), 30)
            finally:
                stop(second)
        finally:
            stop(first)
    assert server.state.completed[(12, 1)]["sha256"] == packed["sha256"]  # verified by the server
    assert [r["type"] for r in server.state.reports[12]] == ["running", "exited", "finished"]
    assert "message" not in server.state.reports[12][-1]


def test_a_job_gone_with_its_shim_is_lost_not_reported(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        first = start_agent(server, workdir)
        try:
            offer(server, assignment(7, "sleep 1000 & sleep 1000"))
            assert server.state.wait_for(lambda: "running" in server.state.types(7), 20)
            kill9(first)
            shim = json.loads((workdir / "runs" / "7-1" / "shim.json").read_text())
            os.kill(shim["pid"], signal.SIGKILL)  # as if the host had lost it
            with server.state.lock:
                server.state.running = [{"job_id": 7, "attempt": 1}]
                server.state.heartbeats.clear()
            second = start_agent(server, workdir)
            try:
                assert server.state.wait_for(lambda: len(server.state.heartbeats) >= 2, 20)
                assert all(hb["running"] == [] for hb in server.state.heartbeats)
                assert job_processes(workdir) == []  # the leftovers were killed
                assert not (workdir / "runs" / "7-1").exists()
            finally:
                stop(second)
        finally:
            stop(first)
    assert server.state.types(7) == ["running"]


def test_a_run_the_server_ended_meanwhile_is_killed(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        first = start_agent(server, workdir)
        try:
            offer(server, assignment(8, "trap '' TERM; sleep 1000"))
            assert server.state.wait_for(lambda: "running" in server.state.types(8), 20)
            kill9(first)
            assert job_processes(workdir)
            # the server declared the node down and requeued the job: register lists nothing
            second = start_agent(server, workdir)
            try:
                assert server.state.wait_for(lambda: server.state.registrations >= 2, 20)
                deadline = time.monotonic() + 10
                while job_processes(workdir) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert job_processes(workdir) == []
            finally:
                stop(second)
        finally:
            stop(first)
    assert server.state.types(8) == ["running"]


def test_a_node_declared_down_registers_again_and_kills_the_runs_it_lost(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with FakeServer() as server:
        agent = start_agent(server, workdir)
        try:
            assert server.state.wait_for(lambda: server.state.registrations == 1, 20)
            offer(server, assignment(11, "trap '' TERM; sleep 1000"))
            assert server.state.wait_for(lambda: "running" in server.state.types(11), 20)
            with server.state.lock:  # the server requeued job 11 while it heard nothing from us
                server.state.node_state = "down"
                server.state.running = []
            assert server.state.wait_for(lambda: server.state.registrations == 2, 10)
            deadline = time.monotonic() + 10
            while job_processes(workdir) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert job_processes(workdir) == []
        finally:
            stop(agent)
    assert server.state.types(11) == ["running"]


def test_the_report_spool_survives_a_restart(tmp_path):
    """Reports queued while the server is unreachable are on disk, and replay in order."""
    spool = tmp_path / "reports.jsonl"
    import threading

    with FakeServer() as server:
        from e31_agent.client import ApiClient

        client = ApiClient(server.url, TOKEN)
        with server.state.lock:
            server.state.fail[("POST", "/api/v1/agent/reports/")] = [0] * 1000
        abort = threading.Event()
        first = Reporter(client, JobRef(9, 1), abort=abort, on_stale=lambda: None, spool_path=spool)
        first.send("accepted")
        first.send("running", pid=1)
        abort.set()  # the agent dies
        first.close()
        with spool.open("ab") as fh:
            fh.write(b'{"report": {"seq": 3, "ty')  # torn by the crash
        assert Spool(spool).load() == (2, [
            {"attempt": 1, "seq": 1, "type": "accepted"}, {"attempt": 1, "seq": 2, "type": "running", "pid": 1},
        ])  # fmt: skip
        with server.state.lock:
            server.state.fail.clear()
        second = Reporter(client, JobRef(9, 1), abort=threading.Event(), on_stale=lambda: None,
                          spool_path=spool)  # fmt: skip
        assert second.send("exited", exit_code=0, reason="exit") == 3
        assert second.wait_sent(10)
        second.close()
        client.close()
    assert [(r["seq"], r["type"]) for r in server.state.reports[9]] == [
        (1, "accepted"), (2, "running"), (3, "exited")]
    assert Spool(spool).load() == (3, [])


def test_the_shim_adopts_double_forked_daemons(tmp_path):
    """A ``setsid`` daemon whose parent died is re-parented to the shim, not to init."""
    if not set_child_subreaper():
        pytest.skip("no PR_SET_CHILD_SUBREAPER on this OS")
    from e31_agent.runner import JobProcess, build_env, new_marker

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[], marker=new_marker("t", 1, 1))
    env.pop("E31_RUN_MARKER")  # found without the marker: the daemon may have scrubbed its env
    env["E31_RUN_MARKER"] = "not-this-run"
    proc = JobProcess.start(["/bin/sh", "-c", "(setsid sleep 1000 &) ; sleep 1000"], cwd=job_dir, env=env,
                            log_path=tmp_path / "log", run_dir=tmp_path / "run")  # fmt: skip
    proc.marker = "unused-marker"
    deadline = time.monotonic() + 5
    while len(proc.processes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    daemons = [p for p in proc.processes() if os.getsid(p.pid) != proc.pgid]
    assert daemons and all(p.ppid() == proc.shim_pid for p in daemons)
    assert proc.stop(1) == []
    assert not any(psutil.pid_exists(p.pid) and p.status() != "zombie" for p in daemons)
