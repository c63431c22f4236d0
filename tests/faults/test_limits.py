"""Issue 12 case 5: the hold never passes the limit, and a cancel during staging is at once.

- a job that traps SIGTERM with a 3 s limit: SIGTERM goes ``grace`` early (grace inside the
  limit: min(E31_GRACE_S, 10 % of the limit)), SIGKILL lands at the limit; the GPU is free and
  rented to the next job within a few seconds; billed at most the limit;
- a cancel while the agent fetches a slow input (a pipe fed a byte at a time; an http source that
  trickles is cut the same way, tests/agent/test_staging_abort.py): the fetch stops at once, the
  job is released ``cancelled`` within a couple of seconds, billed to the stop.
"""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest

from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.e2e.test_faults import job_processes, state_of, submit, wait_until
from tests.e2e.test_five_steps import token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_a_job_that_traps_sigterm_holds_its_gpu_no_longer_than_its_limit(stack_with):
    stack = stack_with(env={"E31_GRACE_S": "30"})  # the configured grace is far longer than the limit
    client = token_client(stack.url, UserFactory(username="trapper"))
    stubborn = submit(client, "trap '' TERM; sleep 300", limit="3s")
    following = submit(client, "echo next")  # waits for the only GPU
    stack.wait_for(lambda: state_of(stubborn) == "released", timeout=30)
    job = Job.objects.get(pk=stubborn)
    lease = Lease.objects.get(job_id=stubborn)
    assert (job.outcome, job.end_reason, job.exit_code) == ("timed_out", "time_limit", 137)  # SIGKILL
    assert lease.billed_seconds <= 3 and lease.charged
    assert lease.released_at - lease.rented_at <= timedelta(seconds=3 + 3)
    assert job_processes(stubborn) == []
    # the GPU went to the next job right after
    stack.wait_for(lambda: Lease.objects.filter(job_id=following).exists(), timeout=10)
    nxt = Lease.objects.get(job_id=following)
    assert lease.released_at <= nxt.rented_at <= lease.rented_at + timedelta(seconds=3 + 4)
    stack.wait_for(lambda: state_of(following) == "released", timeout=30)
    assert Job.objects.get(pk=following).outcome == "succeeded"


@pytest.fixture
def trickle_source(tmp_path):
    """A slow input: a named pipe under an allowed file root that a thread feeds a byte every
    0.2 s (announced as nothing: the agent cannot know when it ends)."""
    root = tmp_path / "inputs"
    root.mkdir()
    fifo = root / "big.bin"
    os.mkfifo(fifo)
    stop = threading.Event()

    def feed() -> None:
        try:
            with open(fifo, "wb", buffering=0) as out:  # blocks until the agent opens it
                while not stop.wait(0.2):
                    out.write(b"x")
        except OSError:
            pass  # the reader went away: the fetch was cut

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    yield root, f"file://{fifo}"
    stop.set()
    try:  # unblock a writer still waiting for a reader
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        pass
    thread.join(5)


def test_a_cancel_during_staging_aborts_the_fetch_at_once(stack_with, trickle_source):
    root, source = trickle_source
    stack = stack_with(env={"E31_FILE_ROOTS": str(root)}, agent_args=["--allow-file-root", str(root)])
    client = token_client(stack.url, UserFactory(username="stager"))
    doc = {"name": "slow-input", "work": {"command": "true"}, "compute": {"gpus": 1, "time_limit": "5m"},
           "data": [{"source": source, "target": "big.bin"}]}
    resp = client.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    stack.wait_for(lambda: Job.objects.get(pk=job_id).staging_bytes_done > 0, timeout=30)
    assert state_of(job_id) == "rented"  # still staging
    answer = client.post(f"/api/v1/jobs/{job_id}/cancel/").json()
    cancelled = time.monotonic()
    asked = Job.objects.get(pk=job_id).cancel_requested_at
    assert answer["cancel"]["effect"] == "stopping"
    assert wait_until(lambda: state_of(job_id) == "released", 5)
    assert time.monotonic() - cancelled <= 5
    job = client.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["outcome"] == "cancelled", job
    lease = Lease.objects.get(job_id=job_id)
    assert lease.end_reason == "cancelled" and lease.charged
    assert lease.run_ended_at <= asked + timedelta(seconds=3)  # billed only to the stop
    assert lease.billed_seconds <= (asked - lease.rented_at).total_seconds() + 3
