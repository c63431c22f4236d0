"""The job sandbox (e31_agent.sandbox) as the shim builds it: real bubblewrap, no server.

The probes of a hostile tenant on the live stack are in tests/security; these
check the pieces: the start-up refusal, slot users, the grace of a stop, the
GPU device nodes and the command-line flags.
"""

import os
import stat
import time
from pathlib import Path

import pytest
from e31_agent import sandbox
from e31_agent.agent import Agent
from e31_agent.cli import parse_args
from e31_agent.config import AgentConfig
from e31_agent.runner import JobProcess, build_env, new_marker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def node() -> sandbox.Sandbox:
    return sandbox.detect()


def start(node: sandbox.Sandbox, tmp_path: Path, command: str, network: str = "none") -> JobProcess:
    job_dir = tmp_path / "jobs" / "1"
    job_dir.mkdir(parents=True)
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={"E31_JOB_ID": "1"}, gpus=["GPU-x"],
                    marker=new_marker("t", 1, 1))
    return JobProcess.start(["/bin/sh", "-c", command], cwd=job_dir, env=env, log_path=tmp_path / "log",
                            run_dir=tmp_path / "run", limits={"sandbox": node.plan(job_dir=job_dir, network=network)})


def wait_exit(proc: JobProcess, timeout: float = 20) -> int:
    end = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < end, "the job did not end"
        time.sleep(0.05)
    return proc.exit_code


def test_the_job_sees_its_dir_at_job_as_its_own_user(node, tmp_path):
    proc = start(node, tmp_path, 'echo "$(id -u) $(pwd) $HOME" > who.txt; ls / > root.txt')
    assert wait_exit(proc) == 0
    proc.stop(1)
    uid, cwd, home = (tmp_path / "jobs" / "1" / "who.txt").read_text().split()
    assert (cwd, home) == ("/job", "/job")
    assert int(uid) != 0 if os.geteuid() == 0 else int(uid) == os.geteuid()
    assert "job" in (tmp_path / "jobs" / "1" / "root.txt").read_text().split()


def test_a_stop_gives_the_job_its_grace_and_leftovers_die_with_the_command(node, tmp_path):
    proc = start(node, tmp_path, "trap 'echo term > got_term; exit 3' TERM; sleep 60 & wait")
    time.sleep(0.5)
    assert proc.processes(), "nothing runs"
    proc.stop(5)
    assert (tmp_path / "jobs" / "1" / "got_term").read_text() == "term\n"
    assert proc.exit_code == 3
    assert proc.processes() == []


def test_a_failed_command_keeps_its_exit_code(node, tmp_path):
    proc = start(node, tmp_path, "exit 7")
    assert wait_exit(proc) == 7
    proc.stop(1)


@pytest.mark.skipif(os.geteuid() != 0, reason="slot users need root")
def test_running_attempts_never_share_a_slot_uid(tmp_path):
    lock_dir = str(tmp_path / "slots")
    first, fd1 = sandbox.take_slot(2310000, 2310001, lock_dir)
    second, fd2 = sandbox.take_slot(2310000, 2310001, lock_dir)
    assert first != second
    with pytest.raises(OSError, match="in use"):
        sandbox.take_slot(2310000, 2310001, lock_dir)
    os.close(fd1)
    again, fd3 = sandbox.take_slot(2310000, 2310001, lock_dir)  # a slot is free again once its holder goes
    assert again == first
    os.close(fd2)
    os.close(fd3)


def test_the_agent_refuses_to_start_without_the_sandbox_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(ValueError, match="bubblewrap.*--unsafe-no-sandbox"):
        Agent(AgentConfig(server="http://127.0.0.1:9", token="t", workdir=tmp_path / "w"))
    agent = Agent(AgentConfig(server="http://127.0.0.1:9", token="t", workdir=tmp_path / "w", unsafe_no_sandbox=True))
    assert agent.sandbox is None


def test_gpu_device_nodes_follow_the_driver_minor_of_each_leased_uuid(tmp_path):
    for pci, uuid, minor in (("0000:01:00.0", "GPU-a", 3), ("0000:02:00.0", "GPU-b", 0)):
        (tmp_path / pci).mkdir()
        (tmp_path / pci / "information").write_text(f"Model: H100\nGPU UUID: {uuid}\nDevice Minor: {minor}\n")
    nodes = sandbox.gpu_device_nodes(["GPU-a"], [0], driver_dir=tmp_path)
    assert nodes[0] == "/dev/nvidia3" and "/dev/nvidiactl" in nodes and "/dev/nvidia0" not in nodes
    assert sandbox.gpu_device_nodes([], [2], driver_dir=tmp_path / "none")[0] == "/dev/nvidia2"


def test_the_command_line_takes_the_sandbox_flags():
    args = parse_args(["--server", "http://x", "--token", "t", "--slot-uids", "5000-5009", "--sandbox-deny",
                       "10.0.0.0/8", "--unsafe-no-sandbox"])
    assert (args.slot_uids, args.unsafe_no_sandbox) == ((5000, 5009), True)
    # the metadata service and the private networks are always denied, unless the operator opts out
    default = ("169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
    assert args.sandbox_deny == default
    assert parse_args(["--server", "http://x", "--token", "t"]).sandbox_deny == default == sandbox.DEFAULT_DENY
    assert parse_args(["--server", "http://x", "--token", "t", "--sandbox-allow-private", "--sandbox-deny",
                       "10.9.0.0/16"]).sandbox_deny == ("169.254.0.0/16", "10.9.0.0/16")
    assert AgentConfig(server="http://x", token="t", workdir=Path("w")).sandbox_deny == sandbox.DEFAULT_DENY
    with pytest.raises(SystemExit):
        parse_args(["--server", "http://x", "--token", "t", "--slot-uids", "0-5"])


def test_an_unknown_network_is_refused_in_the_plan(node, tmp_path):
    with pytest.raises(ValueError, match="network"):
        node.plan(job_dir=tmp_path, network="host")


@pytest.mark.skipif(os.geteuid() != 0, reason="slot users (and a TUN node of their own) need an agent run as root")
def test_where_dev_net_tun_is_closed_slirp4netns_still_runs_as_the_slot_user(node, tmp_path, monkeypatch):
    """``/dev/net/tun`` mode 0600 (as on some hosts): slirp4netns gets a TUN node of the slot
    user's own in a mount namespace of its own, instead of running as root. The host's node is
    left alone; the test makes the agent take it for closed."""
    import subprocess

    import psutil

    monkeypatch.setattr(sandbox, "_slot_may_open_tun", lambda path="/dev/net/tun": False)
    host_tun = os.stat("/dev/net/tun")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    prepared = sandbox.prepare(node.plan(job_dir=job_dir, network="egress"))
    try:
        proc = subprocess.Popen([*prepared.argv, "/bin/sh", "-c", "grep -q tap0 /proc/net/dev && id -u"],
                                pass_fds=prepared.pass_fds, preexec_fn=prepared.preexec(stage=True),
                                env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        prepared.after_fork()
        slirp = prepared.start_network(proc.pid)
        assert slirp is not None
        assert psutil.Process(slirp.pid).uids().real == prepared.uid != 0  # not root
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert int(out) == prepared.uid
    finally:
        prepared.stop_network()
        prepared.close()
    after = os.stat("/dev/net/tun")
    assert (after.st_mode, after.st_uid, after.st_rdev) == (host_tun.st_mode, host_tun.st_uid, host_tun.st_rdev)


def test_the_stage_dir_is_searchable_whatever_the_umask_that_made_its_parent(tmp_path):
    """A first agent started with umask 077 left /run/e31-agent at 0700: every later sandbox
    failed with "Can't find source path .../stage/0: Permission denied"."""
    parent = tmp_path / "e31-agent"
    parent.mkdir(mode=0o700)
    parent.chmod(0o700)
    stage = parent / "stage"
    sandbox._make_searchable(str(stage))
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755 and stat.S_IMODE(stage.stat().st_mode) == 0o755
