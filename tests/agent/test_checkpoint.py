"""The agent's side of checkpoints (issue 24 item 5): the kept version is put back before the run,
the directory is packed at the end even when the outputs do not name it, and a file whose bytes do
not match the kept version fails the start, naming it."""

import hashlib

from .test_agent import assignment, bundle_files, exited_of, node, offer  # noqa: F401

STATE = b"epoch 3\n"


def ckpt_job(job_id: int, command: str, *, sha256: str | None = None) -> dict:
    job = assignment(job_id, command, attempt=2, outputs=["out.txt"])
    job["checkpoint"] = {"path": "ckpt", "attempt": 1, "files": [
        {"path": "ckpt/state.txt", "size_bytes": len(STATE), "sha256": sha256 or hashlib.sha256(STATE).hexdigest()}]}
    return job


def test_an_attempt_resumes_from_the_kept_state_and_packs_the_next_one(node):  # noqa: F811
    server, _agent, _workdir = node
    server.state.checkpoints[(70, "ckpt/state.txt")] = STATE
    offer(server, ckpt_job(70, "cat ckpt/state.txt > out.txt; echo 'epoch 4' > ckpt/state.txt"))
    assert server.state.wait_for(lambda: "finished" in server.state.types(70), 30)
    assert exited_of(server, 70)["exit_code"] == 0
    files = bundle_files(server, 70, attempt=2)
    files.pop("manifest.json", None)
    assert files == {"out.txt": STATE, "ckpt/state.txt": b"epoch 4\n"}


def test_a_kept_file_that_does_not_match_fails_the_start(node):  # noqa: F811
    server, _agent, _workdir = node
    server.state.checkpoints[(71, "ckpt/state.txt")] = b"tampered\n"
    offer(server, ckpt_job(71, "echo ran > out.txt"))
    assert server.state.wait_for(lambda: "finished" in server.state.types(71), 30)
    exited = exited_of(server, 71)
    assert exited["reason"] == "staging_failed" and "ckpt/state.txt" in exited["message"]
