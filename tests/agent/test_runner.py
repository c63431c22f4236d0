"""Runner: the job's environment, exit codes, and stopping every process of it."""

import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from e31_agent.logindex import index_path, parse_index
from e31_agent.runner import MARKER_VAR, JobProcess, build_env, new_marker, supervise


def _start(tmp_path: Path, command: str, **env_kw) -> JobProcess:
    job_dir = tmp_path / "jobs" / "7"
    job_dir.mkdir(parents=True, exist_ok=True)
    env = build_env(
        job_dir=job_dir,
        spec_env=env_kw.get("spec_env", {}),
        assignment_env=env_kw.get("assignment_env", {}),
        gpus=env_kw.get("gpus", [0]),
        marker=new_marker("test", 7, 1),
    )
    return JobProcess.start(
        ["/bin/sh", "-c", command], cwd=job_dir, env=env, log_path=tmp_path / "logs" / "7-1.log",
        run_dir=tmp_path / "runs" / "7-1",
    )


def _left(proc: JobProcess) -> list[psutil.Process]:
    """Every live, non-zombie process of the job, found independently of the runner."""
    left = []
    for p in psutil.process_iter():
        try:
            in_group = os.getpgid(p.pid) == proc.pgid
            marked = not in_group and p.environ().get(MARKER_VAR) == proc.marker
            if (in_group or marked) and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except (psutil.Error, OSError):
            continue
    return left


def _wait_for_children(proc: JobProcess, count: int, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if len(_left(proc)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"job never had {count} processes")


def test_the_env_has_gpus_and_spec_env_but_not_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("E31_NODE_TOKEN", "node-secret-token")
    monkeypatch.setenv("AGENT_ONLY", "x")
    proc = _start(
        tmp_path,
        "env > env.txt; command -v python",
        spec_env={"SEED": "1", "CUDA_VISIBLE_DEVICES": "9"},
        assignment_env={"E31_JOB_ID": "7", "E31_NODE_RANK": "0"},
        gpus=["GPU-2", "GPU-3"],
    )
    result = supervise(
        proc, deadline=time.monotonic() + 10, cancel=threading.Event(),
        drop=threading.Event(), grace_s=1,
    )  # fmt: skip
    assert (result.reason, result.exit_code) == ("exit", 0)
    env = dict(
        line.split("=", 1) for line in (tmp_path / "jobs/7/env.txt").read_text().splitlines()
        if "=" in line
    )  # fmt: skip
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-2,GPU-3"  # the lease wins over the spec
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-2,GPU-3"
    assert env["SEED"] == "1" and env["E31_JOB_ID"] == "7"
    assert env["HOME"] == str(tmp_path / "jobs" / "7")
    assert env["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    assert "E31_NODE_TOKEN" not in env and "AGENT_ONLY" not in env
    assert "node-secret-token" not in (tmp_path / "jobs/7/env.txt").read_text()
    log = (tmp_path / "logs" / "7-1.log").read_text()
    assert log.strip() == os.path.join(os.path.dirname(sys.executable), "python")


@pytest.mark.parametrize(("command", "code"), [("true", 0), ("exit 3", 3), ("kill -9 $$", 137)])
def test_exit_codes_propagate(tmp_path, command, code):
    proc = _start(tmp_path, command)
    result = supervise(
        proc, deadline=time.monotonic() + 10, cancel=threading.Event(),
        drop=threading.Event(), grace_s=1,
    )  # fmt: skip
    assert (result.reason, result.exit_code) == ("exit", code)


def test_stdout_and_stderr_share_the_log_and_the_index_tells_them_apart(tmp_path):
    """Both streams land in the one log; its index names each read's stream and time. Across
    the two pipes the order is as the shim read them (lines written within the same instant to
    different streams may swap), so only each stream's own order is promised."""
    before = time.time()
    proc = _start(tmp_path, "echo out; echo err >&2; echo out2; printf 'no newline' >&2")
    supervise(
        proc, deadline=time.monotonic() + 10, cancel=threading.Event(),
        drop=threading.Event(), grace_s=1,
    )  # fmt: skip
    log_path = tmp_path / "logs" / "7-1.log"
    data = log_path.read_bytes()
    assert sorted(data.decode().replace("no newline", "no newline\n").splitlines()) == sorted(
        ["out", "err", "out2", "no newline"])
    segments, used = parse_index(index_path(log_path).read_bytes())
    assert used == index_path(log_path).stat().st_size
    by_stream: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    pos = 0
    for seg in sorted(segments, key=lambda s: s.offset):
        assert seg.offset == pos  # the index covers the log without gaps
        by_stream[seg.stream] += data[seg.offset:seg.end]
        assert before - 1 <= seg.at <= time.time() + 1
        pos = seg.end
    assert pos == len(data)
    assert by_stream == {"stdout": b"out\nout2\n", "stderr": b"err\nno newline"}


def test_cancel_kills_the_whole_job(tmp_path):
    # a background child, one that left the process group, and a shell ignoring SIGTERM
    proc = _start(tmp_path, "trap '' TERM; sleep 1000 & setsid sleep 1001 & sleep 1002; sleep 1003")
    _wait_for_children(proc, 4)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    result = supervise(
        proc, deadline=time.monotonic() + 60, cancel=cancel, drop=threading.Event(), grace_s=1
    )
    assert result.reason == "cancelled"
    assert result.exit_code == 137  # the shell ignored SIGTERM: SIGKILL after the grace
    assert 1.0 <= time.monotonic() - started < 10
    assert _left(proc) == []


def test_the_deadline_stops_the_job(tmp_path):
    proc = _start(tmp_path, "sleep 1000 & sleep 1000")
    _wait_for_children(proc, 3)
    started = time.monotonic()
    result = supervise(
        proc, deadline=started + 1, cancel=threading.Event(), drop=threading.Event(), grace_s=1
    )
    assert result.reason == "time_limit"
    assert result.exit_code == 143  # SIGTERM was enough
    assert 0.9 <= time.monotonic() - started < 5
    assert _left(proc) == []


def test_leftovers_are_stopped_when_the_shell_exits(tmp_path):
    proc = _start(tmp_path, "sleep 1000 & echo started")
    result = supervise(
        proc, deadline=time.monotonic() + 60, cancel=threading.Event(),
        drop=threading.Event(), grace_s=1,
    )  # fmt: skip
    assert (result.reason, result.exit_code) == ("exit", 0)
    assert _left(proc) == []


def test_stop_is_idempotent(tmp_path):
    proc = _start(tmp_path, "sleep 1000")
    _wait_for_children(proc, 1)
    threads = [threading.Thread(target=proc.stop, args=(1,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert proc.stop(1) == []
    assert _left(proc) == []


def test_the_shim_stops_the_job_itself_when_no_agent_does(tmp_path):
    """The backstop for a frozen agent: at ``stop_at`` the shim stops the whole job on its own."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[], marker=new_marker("t", 3, 1))
    proc = JobProcess.start(
        ["/bin/sh", "-c", "trap '' TERM; sleep 1000 & sleep 1000"], cwd=job_dir, env=env,
        log_path=tmp_path / "log", run_dir=tmp_path / "run",
        limits={"stop_at": time.time() + 0.5, "grace_s": 0.5},
    )  # fmt: skip
    end = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    assert (proc.poll(), proc.stopped_by) == (137, "time_limit")
    assert _left(proc) == []
    result = supervise(proc, deadline=time.monotonic() + 60, cancel=threading.Event(),
                       drop=threading.Event(), grace_s=1)  # fmt: skip
    assert (result.reason, result.exit_code) == ("time_limit", 137)


def test_limits_reach_the_command(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[], marker=new_marker("t", 4, 1))
    cpu = sorted(os.sched_getaffinity(0))[0]
    proc = JobProcess.start(
        ["/bin/sh", "-c", "ulimit -n; ulimit -v; grep Cpus_allowed_list /proc/self/status"],
        cwd=job_dir, env=env, log_path=tmp_path / "log", run_dir=tmp_path / "run",
        limits={"nofile": 512, "memory_bytes": 2 * 1024**3, "cpus": [cpu]},
    )  # fmt: skip
    supervise(proc, deadline=time.monotonic() + 10, cancel=threading.Event(), drop=threading.Event(), grace_s=1)
    lines = (tmp_path / "log").read_text().split("\n")
    assert lines[0] == "512" and lines[1] == str(2 * 1024 * 1024)
    assert lines[2].split()[-1] == str(cpu)


@pytest.mark.skipif(os.geteuid() != 0, reason="running a job as another user needs root (as the agent has)")
def test_a_job_run_as_another_user_may_reopen_its_own_stdout_and_stderr(tmp_path):
    """``> /dev/stdout`` and ``tee /dev/stderr`` reopen the job's pipes by path: they are the job
    user's, not the shim's (the QA pass found `Permission denied` in the sandbox)."""
    job_dir = tmp_path / "jobs" / "7"
    job_dir.mkdir(parents=True)
    os.chown(job_dir, 54321, 54321)
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[0], marker=new_marker("test", 7, 1))
    proc = JobProcess.start(["/bin/sh", "-c", "echo to-stdout > /dev/stdout; echo x | tee /dev/stderr"],
                            cwd=job_dir, env=env, log_path=tmp_path / "logs" / "7-1.log",
                            run_dir=tmp_path / "runs" / "7-1", limits={"uid": 54321, "gid": 54321})
    supervise(proc, deadline=time.monotonic() + 10, cancel=threading.Event(), drop=threading.Event(), grace_s=1)
    log = (tmp_path / "logs" / "7-1.log").read_text()
    assert "Permission denied" not in log
    assert sorted(log.split()) == ["to-stdout", "x", "x"]
