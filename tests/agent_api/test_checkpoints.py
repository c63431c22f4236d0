"""Checkpoints that carry over (issue 24 item 5): what attempt 1 left in ``checkpoint.path`` comes back
to attempt 2 on its node through the assignment and ``GET agent/jobs/<id>/checkpoint/``; a bundle a
lost node never completed leaves the version before it whole; the API lists the versions."""
import hashlib

import pytest

from apps.artifacts.services import bundle_put_chunk
from apps.jobs.checkpoints import checkpoint_for
from apps.jobs.models import Job

from ..drive import Agent, placed, queued_job

pytestmark = pytest.mark.django_db

ON_NODE_A = {"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}


def _attempt(job, clock, files, *, exit_code=1, complete=True):
    agent = Agent(placed(Job.objects.get(pk=job.pk)), clock)
    agent.start()
    agent.say("exited", exit_code=exit_code, reason="exit")
    if complete:
        agent.bundle(files, packer=True)
        agent.say("finished")
    return Job.objects.get(pk=job.pk)


def test_the_next_attempt_gets_the_checkpoint_back_from_its_node(agent, owner, frozen_clock, api):
    job = queued_job(owner, compute=ON_NODE_A, checkpoint={"path": "ckpt/"}, retry={"attempts": 3, "on": ["failed"]},
                     output={"paths": ["out/**"]})
    state = b"epoch 3\n"
    job = _attempt(job, frozen_clock, {"ckpt/state.txt": state, "out/loss.csv": b"1,0.5\n"})
    assert (job.state, job.attempt) == ("queued", 2)
    placed(job)
    [assignment] = agent.get("/api/v1/agent/work/?wait=0").json()["assignments"]
    assert assignment["checkpoint"] == {"path": "ckpt", "attempt": 1, "files": [
        {"path": "ckpt/state.txt", "size_bytes": len(state), "sha256": hashlib.sha256(state).hexdigest()}]}
    url = f"/api/v1/agent/jobs/{job.pk}/checkpoint/"
    got = agent.get(url, {"attempt": 2, "path": "ckpt/state.txt"})
    assert got.status_code == 200 and b"".join(got.streaming_content) == state
    assert agent.get(url, {"attempt": 2, "path": "out/loss.csv"}).status_code == 404  # not the checkpoint
    assert agent.get(url, {"attempt": 1, "path": "ckpt/state.txt"}).status_code == 404  # not an open attempt
    listed = api.get(f"/api/v1/jobs/{job.pk}/").json()["checkpoints"]
    assert [(v["attempt"], v["rank"], v["size_bytes"], v["files"]) for v in listed] == [(1, 0, len(state), 1)]


def test_a_bundle_never_completed_leaves_the_version_before_it(agent, owner, frozen_clock):
    job = queued_job(owner, compute=ON_NODE_A, checkpoint={"path": "ckpt"}, retry={"attempts": 3, "on": ["failed"]})
    job = _attempt(job, frozen_clock, {"ckpt/state.txt": b"epoch 1\n"})
    job = _attempt(job, frozen_clock, {}, complete=False)  # attempt 2's node is lost while it uploads
    part = b"half a bundle"
    bundle_put_chunk(job=job, attempt=2, offset=0, data=part, sha256=hashlib.sha256(part).hexdigest())
    assert (job.state, job.attempt) == ("output", 2)
    version = checkpoint_for(job, attempt=3, rank=0)  # what attempt 3 would start with
    assert version.attempt == 1 and version.files[0]["sha256"] == hashlib.sha256(b"epoch 1\n").hexdigest()


def test_a_first_attempt_has_nothing_to_restore_and_a_job_without_checkpoint_no_plan(agent, owner):
    first = placed(queued_job(owner, compute=ON_NODE_A, checkpoint={"path": "ckpt"}))
    [assignment] = agent.get("/api/v1/agent/work/?wait=0").json()["assignments"]
    assert assignment["checkpoint"] == {"path": "ckpt", "attempt": None, "files": []}
    assert first.spec["checkpoint"] == {"path": "ckpt"}


@pytest.mark.parametrize("checkpoint", [{"path": "../up"}, {"path": "/abs"}, {"path": "."}, {"path": "c/*"},
                                        {"path": "ok", "every": "10m"}, "ckpt"])
def test_a_checkpoint_outside_the_job_dir_is_a_400_naming_it(api, pool, checkpoint):
    from ..factories import spec

    resp = api.post("/api/v1/jobs/", spec(checkpoint=checkpoint), format="json")
    assert resp.status_code == 400 and any(k.startswith("checkpoint") for k in resp.json()), resp.json()


def test_the_job_page_lists_the_kept_versions(agent, owner, frozen_clock, client):
    job = queued_job(owner, compute=ON_NODE_A, checkpoint={"path": "ckpt"}, retry={"attempts": 2, "on": ["failed"]})
    job = _attempt(job, frozen_clock, {"ckpt/a.bin": b"x" * 2048, "ckpt/b.bin": b"y"})
    client.force_login(owner)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Checkpoint <code>ckpt/</code>" in html and "<td>1</td>" in html and "2.0" in html


def test_a_rerun_that_resumes_starts_from_the_old_job_s_checkpoint(agent, owner, frozen_clock, api):
    job = queued_job(owner, compute=ON_NODE_A, checkpoint={"path": "ckpt"})
    job = _attempt(job, frozen_clock, {"ckpt/state.txt": b"epoch 9\n"}, exit_code=0)
    assert job.outcome == "succeeded"
    resp = api.post(f"/api/v1/jobs/{job.pk}/rerun/", {"resume": True}, format="json")
    assert resp.status_code == 201, resp.json()
    new = placed(Job.objects.get(pk=resp.json()["id"]))
    assert new.spec["checkpoint"] == {"path": "ckpt", "resume_from": job.pk}
    [assignment] = agent.get("/api/v1/agent/work/?wait=0").json()["assignments"]
    assert assignment["checkpoint"]["files"][0]["sha256"] == hashlib.sha256(b"epoch 9\n").hexdigest()
    got = agent.get(f"/api/v1/agent/jobs/{new.pk}/checkpoint/", {"attempt": 1, "path": "ckpt/state.txt"})
    assert b"".join(got.streaming_content) == b"epoch 9\n"


def test_resuming_needs_a_checkpoint_and_a_job_of_mine(api, owner, stranger, pool):
    from ..factories import spec

    plain = queued_job(owner)
    resp = api.post(f"/api/v1/jobs/{plain.pk}/rerun/", {"resume": True}, format="json")
    assert resp.status_code == 400 and "resume" in resp.json()
    theirs = queued_job(stranger, checkpoint={"path": "ckpt"})
    resp = api.post("/api/v1/jobs/", spec(checkpoint={"path": "ckpt", "resume_from": theirs.pk}), format="json")
    assert resp.status_code == 400 and "checkpoint.resume_from" in resp.json()
