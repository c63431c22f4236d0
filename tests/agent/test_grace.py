"""The grace, for real (SPEC §6): a command that traps SIGTERM to save its state, without ``exec``,
gets the grace after a cancel and at its time limit; its saved file is in the bundle."""

import psutil
import pytest

from .registry import image_job, registry  # noqa: F401
from .test_agent import assignment, bundle_files, exited_of, job_processes, node, offer  # noqa: F401

# a child that saves its state in about 1.5 s on SIGTERM, under `sh -c`, behind `& wait`
SAVER = (
    "cat > s.sh <<'X'\ntrap 'sleep 1.5; echo saved > saved.txt; exit 0' TERM\n"
    "echo up > up.txt\nwhile :; do sleep 0.1; done\nX\nsh s.sh & wait"
)


def in_loop(workdir) -> bool:
    for p in job_processes(workdir):
        try:
            if p.cmdline() == ["sleep", "0.1"]:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def cancel(server, job_id):
    with server.state.lock:
        server.state.cancel.append({"job_id": job_id, "attempt": 1})
        server.state.lock.notify_all()


@pytest.mark.parametrize("stop", ["cancel", "time_limit"])
def test_a_saver_gets_the_grace_and_its_file_is_in_the_bundle(node, stop):  # noqa: F811
    server, agent, workdir = node
    job_id = 40 if stop == "cancel" else 41
    deadline = 59.5 if stop == "cancel" else 7  # the time limit's stop comes at 7 - 3 = 4 s
    offer(server, assignment(job_id, SAVER, outputs=["saved.txt"], grace_s=3, deadline_in_s=deadline))
    assert server.state.wait_for(lambda: "running" in server.state.types(job_id))
    # the saver's loop runs, so its trap is set (under a loaded CI, the stop came before it once)
    assert server.state.wait_for(lambda: in_loop(workdir), 3.5)
    if stop == "cancel":
        cancel(server, job_id)
    assert server.state.wait_for(lambda: "finished" in server.state.types(job_id), 15)
    assert exited_of(server, job_id)["reason"] == ("cancelled" if stop == "cancel" else "time_limit")
    assert bundle_files(server, job_id)["saved.txt"] == b"saved\n"
    assert job_processes(workdir) == []


def test_a_saver_in_a_container_image_gets_the_grace_after_a_cancel(node, registry, monkeypatch):  # noqa: F811
    """The same saver inside a podman container (issue 24 item 4): the stop reaches it through
    podman and the image's init, and its file is in the bundle."""
    monkeypatch.setenv("E31_INSECURE_REGISTRIES", registry)
    server, _agent, _workdir = node
    offer(server, image_job(42, f"{registry}/e31/busy:1", login=True, command=SAVER, outputs=["saved.txt"],
                            grace_s=3, deadline_in_s=59.5))
    assert server.state.wait_for(lambda: "running" in server.state.types(42), 60)
    assert server.state.wait_for(lambda: "up" in str(server.state.reports[42]) or _up(_workdir, 42), 10)
    cancel(server, 42)
    assert server.state.wait_for(lambda: "finished" in server.state.types(42), 20)
    assert exited_of(server, 42)["reason"] == "cancelled"
    assert bundle_files(server, 42)["saved.txt"] == b"saved\n"


def _up(workdir, job_id: int) -> bool:
    return any(p.name == "up.txt" for p in workdir.rglob("up.txt"))
