"""A full disk fails safely (issue 26 item 4): on a node whose work dir is a 48 MB file system, a job
whose outputs cannot be packed beside them ends with "no space left on the node ... need X, free Y"
within seconds, leaves no half-written bundle, and the agent takes the next job; inputs of known
size that cannot fit fail staging before a byte is fetched."""

import os
import subprocess
import threading

import pytest
from e31_agent.agent import Agent
from e31_agent.config import AgentConfig

from .fake_server import TOKEN, FakeServer
from .test_agent import assignment, exited_of, offer


@pytest.fixture
def small_node(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the disk test mounts a small tmpfs: run it as root (CI does)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], check=True)
    try:
        with FakeServer() as server:
            agent = Agent(AgentConfig(server=server.url, token=TOKEN, workdir=mnt / "w", simulate="1xH100-80GB",
                                      shutdown_grace_s=1, unsafe_no_sandbox=True))
            thread = threading.Thread(target=agent.run, daemon=True)
            thread.start()
            yield server, mnt
            agent.stop()
            thread.join(20)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_outputs_that_cannot_be_packed_beside_themselves_fail_with_both_figures(small_node):
    server, mnt = small_node
    offer(server, assignment(80, "head -c 30000000 /dev/zero > big.bin", outputs=["big.bin"]))
    assert server.state.wait_for(lambda: "finished" in server.state.types(80), 30)
    finished = [r for r in server.state.reports[80] if r["type"] == "finished"][-1]
    assert finished["code"] == "packing_failed", finished
    assert "no space left on the node to pack the outputs: need 31.1 MB, free" in finished["message"]
    assert not list((mnt / "w").rglob("bundle.tar"))  # nothing half written
    offer(server, assignment(81, "echo fine > ok.txt", outputs=["ok.txt"]))  # the agent goes on
    assert server.state.wait_for(lambda: "finished" in server.state.types(81), 30)
    assert exited_of(server, 81)["exit_code"] == 0


def test_inputs_of_known_size_that_cannot_fit_fail_staging_at_once_with_both_figures(tmp_path, monkeypatch):
    """Staging refuses before a byte is fetched: "need X, free Y", nothing in the job dir (no root:
    the free space is what ``shutil.disk_usage`` says, here 20 MB)."""
    from collections import namedtuple

    from e31_agent import diskspace
    from e31_agent.models import DataItem
    from e31_agent.staging import Stager, StagingError

    src, job = tmp_path / "src", tmp_path / "job"
    src.mkdir()
    job.mkdir()
    with open(src / "big.bin", "wb") as fh:
        fh.truncate(40_000_000)  # sparse: its size is known from a stat, nothing is written
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 20_000_000, 20_000_000))
    stager = Stager(client=None, job_dir=job, tmp_dir=tmp_path / "tmp", file_roots=[src], cache=None)
    with pytest.raises(StagingError, match=r"no space left on the node to stage the inputs: need 40.0 MB, "
                                           r"free 20.0 MB; nothing was written"):
        stager.stage([DataItem(source=(src / "big.bin").as_uri())])
    assert not any(job.iterdir())
