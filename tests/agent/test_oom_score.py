"""The OOM killer takes the job first (issue 26 item 5): a job's command runs at oom_score_adj +500,
its shim (and the agent) at -1000 where the kernel allows it (root with CAP_SYS_RESOURCE; this
machine's container refuses any lowering, so there the shim keeps its 0: still below the job)."""

import subprocess
import sys

import psutil

from .test_agent import assignment, bundle_files, node, offer  # noqa: F401


def test_the_job_is_the_oom_killer_s_first_choice_and_its_shim_the_last(node):  # noqa: F811
    server, _agent, _workdir = node
    offer(server, assignment(90, "cat /proc/self/oom_score_adj > adj.txt; sleep 2", outputs=["adj.txt"]))
    assert server.state.wait_for(lambda: "running" in server.state.types(90), 15)
    shims = [p for p in psutil.Process().children(recursive=True) if "e31_agent.shim" in _cmdline(p)]
    want = {-1000} if _can_lower() else {0}
    assert shims and {int(open(f"/proc/{p.pid}/oom_score_adj").read()) for p in shims} == want
    assert server.state.wait_for(lambda: "finished" in server.state.types(90), 15)
    assert bundle_files(server, 90)["adj.txt"].strip() == b"500"


def _cmdline(process: psutil.Process) -> str:
    """The command line, or "" for a process that ended (or is a zombie) while the test looked."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _can_lower() -> bool:
    """Whether a root process here may set -1000 (a child tries, so this one's score is untouched)."""
    probe = "from e31_agent.oom import protect_supervisor; raise SystemExit(0 if protect_supervisor() else 1)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
