"""cgroup v2 memory caps, against a stand-in of the cgroup filesystem (this machine has cgroup v1).

The kernel side (a real ``memory.max`` killing a job) needs a delegated cgroup v2 tree; here the
files the agent writes are checked: what it enables, where it moves itself and each run.
"""

import os
import threading
import time
from pathlib import Path

from e31_agent.cgroups import JobCgroups, own_cgroup
from e31_agent.runner import JobProcess, build_env, new_marker, supervise


def fake_tree(tmp_path: Path, *, controllers: str = "cpu memory pids") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    svc = root / "system.slice" / "e31-agent.service"
    svc.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers)
    (svc / "cgroup.controllers").write_text(controllers)
    (svc / "cgroup.subtree_control").write_text("")
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/system.slice/e31-agent.service\n")
    return root, proc


def test_cgroup_v1_or_no_memory_controller_means_no_cgroups(tmp_path):
    assert JobCgroups.detect(root=tmp_path, proc_cgroup=tmp_path / "none") is None
    root, proc = fake_tree(tmp_path, controllers="cpu pids")
    assert JobCgroups.detect(root=root, proc_cgroup=proc) is None


def test_the_agent_moves_into_a_leaf_and_caps_each_run(tmp_path):
    root, proc = fake_tree(tmp_path)
    assert own_cgroup(proc) == "/system.slice/e31-agent.service"
    cgroups = JobCgroups.detect(root=root, proc_cgroup=proc, pid=4242)
    assert cgroups is not None
    base = root / "system.slice" / "e31-agent.service"
    assert (base / "agent" / "cgroup.procs").read_text() == "4242"
    assert (base / "cgroup.subtree_control").read_text() == "+memory"
    path = cgroups.create("job-5-1", 8 * 1024**3)
    assert (path / "memory.max").read_text() == str(8 * 1024**3)
    assert (path / "memory.swap.max").read_text() == "0"


def test_the_shim_joins_the_run_cgroup_before_the_command_starts(tmp_path):
    group = tmp_path / "job-6-1"
    group.mkdir()
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[], marker=new_marker("t", 6, 1))
    proc = JobProcess.start(["/bin/sh", "-c", "true"], cwd=job_dir, env=env, log_path=tmp_path / "log",
                            run_dir=tmp_path / "run", limits={"cgroup": str(group)})  # fmt: skip
    supervise(proc, deadline=time.monotonic() + 10, cancel=threading.Event(), drop=threading.Event(), grace_s=1)
    assert (group / "cgroup.procs").read_text() == "0"  # "0": the writing process (the shim) itself
    assert os.path.exists(tmp_path / "run" / "exit.json")
