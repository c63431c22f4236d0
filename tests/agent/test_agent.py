"""The whole agent against the fake server: accept to finished, cancel, time limit, stale."""

import io
import json
import os
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from e31_agent.agent import Agent
from e31_agent.config import AgentConfig, Workdir
from e31_agent.runner import MARKER_VAR

from .fake_server import TOKEN, FakeServer


def assignment(job_id: int, command: str, **kw: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": kw.get("attempt", 1),
        "lease_id": 100 + job_id,
        "gpus": [{"index": i, "uuid": f"GPU-{i}"} for i in kw.get("gpus", [1])],
        "time_limit_s": 60,
        "deadline_in_s": kw.get("deadline_in_s", 59.5),
        "grace_s": kw.get("grace_s", 1),
        "env": {"E31_JOB_ID": str(job_id), "E31_NODE_RANK": "0", "E31_NUM_NODES": "1",
                "E31_MASTER_ADDR": "localhost"},
        "spec": {
            "name": f"job-{job_id}",
            "work": {"command": command, "image": None, "env": kw.get("env", {}), "kind": "other"},
            "data": kw.get("data", []),
            "compute": {"gpus": 1, "nodes": 1, "time_limit": 60},
            "output": {"paths": kw.get("outputs", [])},
        },
    }  # fmt: skip


def job_processes(workdir: Path) -> list[psutil.Process]:
    scope = Workdir(workdir).scope + ":"
    left = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER_VAR, "").startswith(scope) and p.status() != "zombie":
                left.append(p)
        except (psutil.Error, OSError):
            continue
    return left


def bundle_files(server: FakeServer, job_id: int, attempt: int = 1) -> dict[str, bytes]:
    data = bytes(server.state.bundles[(job_id, attempt)])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


@pytest.fixture
def node(tmp_path):
    with FakeServer() as server:
        workdir = tmp_path / "w"
        config = AgentConfig(
            server=server.url,
            token=TOKEN,
            workdir=workdir,
            simulate="2xH100-80GB",
            shutdown_grace_s=1,
        )
        agent = Agent(config)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        yield server, agent, workdir
        agent.stop()
        thread.join(20)
        assert not thread.is_alive()
        assert job_processes(workdir) == []


def exited_of(server: FakeServer, job_id: int) -> dict[str, Any]:
    """The job's ``exited``: its own report, or the one its ``finished`` carries (folded)."""
    reports = server.state.reports[job_id]
    alone = [r for r in reports if r["type"] == "exited"]
    folded = [r["exited"] for r in reports if r["type"] == "finished" and "exited" in r]
    assert len(alone) + len(folded) == 1, reports
    return (alone + folded)[0]


def offer(server: FakeServer, *assignments: dict[str, Any]) -> None:
    with server.state.lock:
        server.state.assignments.extend(assignments)
        server.state.lock.notify_all()


def test_a_job_goes_from_accept_to_finished(node):
    server, agent, workdir = node
    server.state.uploads["u1"] = ("in.txt", b"input data\n")
    offer(
        server,
        assignment(
            12,
            "echo hello; cat data/in.txt; echo oops >&2; mkdir -p out/sub; sleep 0.5;"
            " echo $CUDA_VISIBLE_DEVICES > out/gpus.txt; id -u > out/uid.txt; echo $SEED-$E31_JOB_ID > out/sub/s.txt",
            gpus=[0, 1],
            env={"SEED": "7"},
            data=[{"source": "upload:u1", "target": "data/", "sha256": None, "extract": False}],
            outputs=["out/**"],
        ),
    )
    assert server.state.wait_for(lambda: "finished" in server.state.types(12))
    reports = server.state.reports[12]
    types = [r["type"] for r in reports]
    assert types[0] == "accepted" and types[-3:] == ["running", "exited", "finished"]
    assert set(types[1:-3]) == {"staging"}
    assert [r["seq"] for r in reports] == list(range(1, len(reports) + 1))
    exited = reports[-2]
    assert (exited["exit_code"], exited["reason"]) == (0, "exit")
    assert sorted(bytes(server.state.logs[(12, 1)]).splitlines()) == [b"hello", b"input data", b"oops"]
    # each post holds one stream's bytes and says which, with the node-clock time it was read
    posts = [p for p in server.state.log_posts if p[:2] == (12, 1)]
    streams = {"stdout": b"", "stderr": b""}
    for _, _, _, body, stream, at in posts:
        streams[stream] += body
        assert at is not None and abs(float(at) - time.time()) < 120
    assert streams == {"stdout": b"hello\ninput data\n", "stderr": b"oops\n"}
    assert server.state.completed[(12, 1)]["unmatched"] == []  # every declared output matched
    files = bundle_files(server, 12)
    assert files["out/gpus.txt"] == b"GPU-0,GPU-1\n" and files["out/sub/s.txt"] == b"7-12\n"
    # sandboxed: as root, jobs run as a slot user of their own; else as the agent's user in a user namespace
    uid = int(files["out/uid.txt"])
    if os.geteuid() == 0:
        assert agent.sandbox is not None and agent.sandbox.slots[0] <= uid <= agent.sandbox.slots[1]
    else:
        assert uid == os.geteuid()
    assert inventory_of(server)["sandboxed"] is True
    manifest = json.loads(files["manifest.json"])
    assert manifest["job_id"] == 12
    assert {f["path"] for f in manifest["files"]} == {"out/gpus.txt", "out/uid.txt", "out/sub/s.txt"}
    assert (12, 1) in server.state.completed
    inventory = server.state.inventory
    assert inventory["simulated"] and [g["model"] for g in inventory["gpus"]] == ["H100-80GB"] * 2
    assert any(
        {"job_id": 12, "attempt": 1} in hb["running"] for hb in list(server.state.heartbeats)
    )
    assert all(hb["health"]["source"] == "simulated" for hb in list(server.state.heartbeats))
    assert isinstance(server.state.heartbeats[0]["cached_inputs"], list)  # issue 14 item 5: the first beat has it
    assert server.state.wait_for(lambda: not (workdir / "jobs" / "12").exists())


def test_several_jobs_run_at_once(node):
    server, agent, workdir = node
    offer(server, assignment(1, "sleep 1; echo one"), assignment(2, "sleep 1; echo two"))
    assert server.state.wait_for(
        lambda: "finished" in server.state.types(1) and "finished" in server.state.types(2)
    )
    # both were running before either ended
    with server.state.lock:
        order = [(r["type"], j) for j in (1, 2) for r in server.state.reports[j]]
    assert ("running", 1) in order and ("running", 2) in order
    running_at = [i for i, (t, _) in enumerate(order) if t == "running"]
    assert len(running_at) == 2


def test_cancel_stops_the_job_and_packs_what_is_there(node):
    server, agent, workdir = node
    offer(
        server,
        assignment(
            20,
            "echo partial > partial.txt; sleep 1000 & sleep 1000",
            outputs=["partial.txt"],
            grace_s=1,
        ),
    )
    assert server.state.wait_for(lambda: "running" in server.state.types(20))
    assert server.state.wait_for(lambda: len(job_processes(workdir)) >= 3, 5)
    with server.state.lock:
        server.state.cancel.append({"job_id": 20, "attempt": 1})
        server.state.lock.notify_all()
    assert server.state.wait_for(lambda: "finished" in server.state.types(20))
    exited = [r for r in server.state.reports[20] if r["type"] == "exited"][0]
    assert exited["reason"] == "cancelled" and exited["exit_code"] == 143
    assert bundle_files(server, 20)["partial.txt"] == b"partial\n"
    assert job_processes(workdir) == []


def test_the_time_limit_stops_the_job(node):
    server, agent, workdir = node
    offer(server, assignment(30, "sleep 1000 & sleep 1000", deadline_in_s=2, grace_s=1))
    assert server.state.wait_for(lambda: "finished" in server.state.types(30))
    assert server.state.types(30) == ["running", "finished"]  # nothing staged, nothing to pack: folded
    exited = exited_of(server, 30)
    assert (exited["reason"], exited["exit_code"]) == ("time_limit", 143)
    assert job_processes(workdir) == []


def test_failed_staging_never_starts_the_run(node):
    server, agent, workdir = node
    server.state.uploads["u2"] = ("x.bin", b"abc")
    offer(
        server,
        assignment(
            40,
            "touch ran",
            data=[{"source": "upload:u2", "target": "", "sha256": "0" * 64, "extract": False}],
            outputs=["ran"],
        ),
    )
    assert server.state.wait_for(lambda: "finished" in server.state.types(40))
    types = server.state.types(40)
    assert "running" not in types
    assert types[0] == "accepted" and types[-1] == "finished"  # staged: accepted on its own
    exited = exited_of(server, 40)  # nothing packed: folded into finished
    assert exited["reason"] == "staging_failed" and exited["exit_code"] is None
    assert "sha256 mismatch" in exited["message"]
    assert (40, 1) not in server.state.completed  # nothing ran, nothing to pack


def test_exit_codes_reach_the_server(node):
    server, agent, workdir = node
    offer(server, assignment(50, "echo failing; exit 3", outputs=["*.txt"]))
    assert server.state.wait_for(lambda: "finished" in server.state.types(50))
    exited = [r for r in server.state.reports[50] if r["type"] == "exited"][0]
    assert (exited["reason"], exited["exit_code"]) == ("exit", 3)
    assert json.loads(bundle_files(server, 50)["manifest.json"])["files"] == []


def test_a_stale_attempt_is_killed_and_dropped(node):
    server, agent, workdir = node
    offer(server, assignment(60, "while true; do echo tick; sleep 0.1; done"))
    assert server.state.wait_for(lambda: "running" in server.state.types(60))
    with server.state.lock:
        server.state.stale.add((60, 1))
    assert server.state.wait_for(lambda: not agent.running(), 10)
    assert job_processes(workdir) == []
    assert "exited" not in server.state.types(60)


def test_stopping_the_agent_kills_its_jobs(tmp_path):
    with FakeServer() as server:
        workdir = tmp_path / "w"
        config = AgentConfig(
            server=server.url,
            token=TOKEN,
            workdir=workdir,
            simulate="1xA100-40GB",
            shutdown_grace_s=1,  # the job's own grace is 30 s; the agent does not wait that long
        )
        agent = Agent(config)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        offer(server, assignment(70, "trap '' TERM; sleep 1000", grace_s=30))
        assert server.state.wait_for(lambda: "running" in server.state.types(70))
        assert server.state.wait_for(lambda: len(job_processes(workdir)) >= 2, 5)
        agent.stop()
        thread.join(20)
        assert not thread.is_alive()
        assert job_processes(workdir) == []
        assert "exited" not in server.state.types(70)


def test_a_restarted_agent_kills_what_a_crashed_one_left(tmp_path):
    workdir = tmp_path / "w"
    marker = f"{Workdir(workdir).scope}:80:1:abc"
    orphan = subprocess.Popen(
        ["sleep", "1000"], env={MARKER_VAR: marker, "PATH": os.defpath}, start_new_session=True
    )
    (workdir / "jobs" / "80").mkdir(parents=True)
    with FakeServer() as server:
        agent = Agent(
            AgentConfig(server=server.url, token=TOKEN, workdir=workdir, simulate="1xL4-24GB")
        )
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        assert server.state.wait_for(lambda: server.state.inventory is not None)
        assert orphan.wait(5) == -9
        assert not (workdir / "jobs" / "80").exists()
        agent.stop()
        thread.join(20)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_unsandboxed_as_root_a_named_job_user_runs_the_command_and_owns_the_job_dir(tmp_path):
    import pwd

    nobody = pwd.getpwnam("nobody")
    with FakeServer() as server:
        workdir = tmp_path / "w"
        agent = Agent(AgentConfig(server=server.url, token=TOKEN, workdir=workdir, simulate="1xL4-24GB",
                                  job_user="nobody", shutdown_grace_s=1, unsafe_no_sandbox=True))  # fmt: skip
        assert agent.job_user == (nobody.pw_uid, nobody.pw_gid) and agent.sandbox is None
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        try:
            offer(server, assignment(90, "id -u > uid.txt; stat -c %u . > owner.txt; touch mine",
                                     outputs=["*.txt"]))  # fmt: skip
            assert server.state.wait_for(lambda: "finished" in server.state.types(90))
        finally:
            agent.stop()
            thread.join(20)
    files = bundle_files(server, 90)
    assert int(files["uid.txt"]) == nobody.pw_uid == int(files["owner.txt"])
    assert server.state.inventory["sandboxed"] is False  # the server marks the node
    assert server.state.reports[90][-2]["exit_code"] == 0


def inventory_of(server: FakeServer) -> dict:
    return server.state.inventory


def test_outputs_that_do_not_come_back_are_named_by_a_code(node):
    """Protocol v3: ``finished`` says what went wrong with the outputs in ``code``; the server acts
    on it (the message is for people)."""
    server, agent, workdir = node
    big = assignment(60, "head -c 5000 /dev/zero > big.bin", outputs=["big.bin"])
    big["output_max_bytes"] = 1000  # the site's cap on the bundle's files: packing fails
    offer(server, big, assignment(61, "echo fine > ok.txt", outputs=["ok.txt"]))
    assert server.state.wait_for(lambda: "finished" in server.state.types(60) and "finished" in server.state.types(61))
    [failed] = [r for r in server.state.reports[60] if r["type"] == "finished"]
    assert failed["code"] == "packing_failed" and failed["message"].startswith("packing outputs failed")
    [fine] = [r for r in server.state.reports[61] if r["type"] == "finished"]
    assert "code" not in fine and "message" not in fine
