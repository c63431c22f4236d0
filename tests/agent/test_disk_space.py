"""A full disk fails safely (issue 26 item 4): on a node whose work dir is a 48 MB file system, a job
whose outputs cannot be packed beside them ends with "no space left on the node ... need X, free Y"
within seconds, leaves no half-written bundle, and the agent takes the next job."""

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
