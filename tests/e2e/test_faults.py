"""Fault drills on the live stack (issue 4, "Done when"): real uvicorn, Celery worker and beat,
real agent processes, real signals.

- an agent killed with ``kill -9`` mid-run: the node goes down, the job back to the queue,
  its lease closed and not charged, nothing placed on the node until it comes back;
- a cancelled job whose children ignore SIGTERM (one double-forked with ``setsid``): none
  of its processes is left after the grace period;
- a job cut off from its agent (SIGSTOP) still ends at its time limit, billed exactly that;
- every web process stopped for 30 s while a job runs: it finishes, each report, event and
  log chunk arrives once, the bundle verifies;
- an agent killed and started again mid-job takes the job up: it finishes with its full log.
"""
from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import httpx
import psutil
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from apps.agent_api.models import AgentReport
from apps.jobs.models import Job, JobEvent
from apps.jobs.services.logs import log_pieces
from apps.metering.models import Lease
from apps.pool.models import Node
from devstack import LocalStack
from tests.factories import UserFactory

from .conftest import E2E_REDIS_DB, database_url, node_token
from .test_five_steps import check_bundle, check_meter, token_client

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# Short clocks so each drill takes seconds: heartbeats every second, the node watch every
# second, SIGTERM-to-SIGKILL grace 1 s, agents that retry at most every 2 s, and a server that ends a
# silent agent's run 5 s past its limit + grace.
FAST = {"E31_HEARTBEAT_S": "1", "E31_NODE_WATCH_PERIOD_S": "1", "E31_SCHEDULER_PERIOD_S": "1",
        "E31_GRACE_S": "1", "E31_AGENT_POLL_WAIT_S": "5", "E31_AGENT_RETRY_MAX_S": "2",
        "E31_TIME_LIMIT_SLACK_S": "5"}
MARKER_VAR = "E31_RUN_MARKER"


@pytest.fixture
def make_stack(transactional_db, tmp_path):
    """Start a one-node stack (node-a, 1 x H100) with beat and ``loss_timeout_s``."""
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("end-to-end tests need DATABASE_URL (PostgreSQL) and REDIS_URL; run `make test`")
    db = int(os.environ.get("E31_E2E_REDIS_DB", E2E_REDIS_DB))
    started: list[LocalStack] = []

    def make(loss_timeout_s: int) -> LocalStack:
        live = LocalStack(database_url=database_url(), redis_url=settings.REDIS_URL.rsplit("/", 1)[0] + f"/{db}",
                          var_dir=tmp_path / "var", agents=[("node-a", "1xH100-80GB")], beat=True,
                          env={**FAST, "E31_NODE_LOSS_TIMEOUT_S": str(loss_timeout_s)}, issue_token=node_token)
        started.append(live)
        live.start()
        live.wait_for(lambda: Node.objects.filter(name="node-a", state="up").exists(), timeout=30)
        return live

    yield make
    for live in started:
        live.stop()


@pytest.fixture
def api(transactional_db):
    return lambda stack: token_client(stack.url, UserFactory(username="faults"))


def submit(client: httpx.Client, command: str, *, limit: str = "2m", outputs: list[str] | None = None) -> int:
    doc = {"name": "drill", "work": {"command": command}, "compute": {"gpus": 1, "time_limit": limit},
           "output": {"paths": outputs or []}}
    resp = client.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def state_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def job_processes(job_id: int) -> list[psutil.Process]:
    """Live processes of the job, found by the marker every process of a run carries."""
    found = []
    for proc in psutil.process_iter():
        try:
            marker = proc.environ().get(MARKER_VAR, "")
            if f":{job_id}:" in marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_until(predicate, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def check_reports_once(job_id: int, attempt: int = 1) -> list[str]:
    """The agent's reports as the server applied them: seqs 1..n, each once, in order."""
    reports = list(AgentReport.objects.filter(job_id=job_id, attempt=attempt).order_by("seq"))
    assert [r.seq for r in reports] == list(range(1, len(reports) + 1))
    types = [r.type for r in reports]
    for once in ("running", "finished"):
        assert types.count(once) == 1, types
    # protocol v2: "accepted" only when inputs were staged (else "running" stands for it); "exited"
    # on its own only when there was a bundle to pack (else "finished" carries it)
    assert types.count("accepted") <= 1, types
    folded = sum(1 for r in reports if r.type == "finished" and r.payload.get("exited"))
    assert types.count("exited") + folded == 1, types
    return types


def check_log_once(stack, job_id: int, attempt: int = 1) -> bytes:
    """Log chunks tile the log: no byte stored twice, none missing (read from the database rows,
    or from the storage object the stack's worker compacted them into at release, under the
    stack's own media directory)."""
    job = Job.objects.get(pk=job_id)
    with override_settings(MEDIA_ROOT=str(stack.var_dir / "media")):
        chunks = log_pieces(job, attempt)
    at = 0
    for chunk in chunks:
        assert chunk.offset == at, (chunk.offset, at)
        at += len(chunk.data)
    assert at == job.log_size
    return b"".join(c.data for c in chunks)


def test_a_killed_agent_gives_its_job_back_and_its_node_takes_nothing(make_stack, api):
    stack = make_stack(loss_timeout_s=4)
    client = api(stack)
    first = submit(client, "sleep 300")
    stack.wait_for(lambda: state_of(first) == "running", timeout=30)
    stack.signal_agent("node-a", signal.SIGKILL)
    killed_at = time.monotonic()

    assert wait_until(lambda: state_of(first) == "queued", 60)
    assert time.monotonic() - killed_at < 60
    job = Job.objects.get(pk=first)
    assert job.attempt == 2
    lease = Lease.objects.get(job_id=first, attempt=1)
    assert lease.released_at is not None and lease.charged is False
    assert Node.objects.get(name="node-a").state == "down"

    second = submit(client, "echo hi")
    time.sleep(3)  # several scheduling cycles: nothing goes to a node that is down
    assert not Lease.objects.filter(job_id__in=[first, second], released_at__isnull=True).exists()
    assert {state_of(first), state_of(second)} == {"queued"}

    stack.start_agent("node-a")  # the node comes back: it takes work again
    stack.wait_for(lambda: Node.objects.get(name="node-a").state == "up", timeout=30)
    stack.wait_for(lambda: Lease.objects.filter(job_id=first, attempt=2).exists(), timeout=30)
    # the run the dead agent left is not the server's any more: the new agent killed it
    assert wait_until(lambda: not [p for p in job_processes(first) if f":{first}:1:" in p.environ().get(
        MARKER_VAR, "")], 20)
    client.post(f"/api/v1/jobs/{first}/cancel/")
    stack.wait_for(lambda: state_of(first) == "released" and state_of(second) == "released", timeout=60)


def test_cancel_leaves_no_process_even_when_children_ignore_sigterm(make_stack, api):
    stack = make_stack(loss_timeout_s=30)
    client = api(stack)
    command = ("trap '' TERM; (trap '' TERM; sleep 1000) & "
               "(setsid sh -c \"trap '' TERM; sleep 1001\" &); "
               "echo started; sleep 1002")
    job_id = submit(client, command)
    stack.wait_for(lambda: len(job_processes(job_id)) >= 4, timeout=30)
    client.post(f"/api/v1/jobs/{job_id}/cancel/")
    cancelled = time.monotonic()
    stack.wait_for(lambda: state_of(job_id) == "released", timeout=30)
    grace = int(FAST["E31_GRACE_S"])
    assert wait_until(lambda: job_processes(job_id) == [], grace + 5)
    assert time.monotonic() - cancelled >= grace
    job = Job.objects.get(pk=job_id)
    assert (job.outcome, job.exit_code) == ("cancelled", 137)  # the shell ignored SIGTERM: SIGKILL
    check_meter(job_id)


def test_a_job_cut_off_from_its_agent_ends_at_its_time_limit(make_stack, api):
    stack = make_stack(loss_timeout_s=60)  # longer than limit + the server's slack: not a node loss
    client = api(stack)
    job_id = submit(client, "sleep 1000", limit="3s")
    stack.wait_for(lambda: state_of(job_id) == "running", timeout=30)
    stack.signal_agent("node-a", signal.SIGSTOP)
    try:
        slack = int(FAST["E31_GRACE_S"]) + int(FAST["E31_TIME_LIMIT_SLACK_S"])  # the server's wait for the agent
        stack.wait_for(lambda: state_of(job_id) == "released", timeout=slack + 20)
        # on the host, the job's shim stopped the run itself, a few seconds past the limit
        assert job_processes(job_id) == []
    finally:
        stack.signal_agent("node-a", signal.SIGCONT)
    job = Job.objects.get(pk=job_id)
    assert (job.outcome, job.end_reason) == ("timed_out", "time_limit")
    lease = Lease.objects.get(job_id=job_id)
    assert lease.billed_seconds == 3 and lease.charged
    assert lease.run_ended_at == lease.rented_at + timedelta(seconds=3)
    check_meter(job_id)
    # the thawed agent hears its attempt is over (409 stale) and drops it
    agent_dir = stack.var_dir / "agents" / "node-a"
    assert wait_until(lambda: not (agent_dir / "runs" / f"{job_id}-1").exists(), 30)


def test_a_30_s_server_outage_loses_nothing(make_stack, api):
    stack = make_stack(loss_timeout_s=60)  # outage + the agents' catch-up stay under the loss timeout
    client = api(stack)
    command = ("for i in $(seq 1 60); do echo line $i; sleep 0.1; done; "
               "head -c 3000000 /dev/urandom > out.bin; echo done > out.txt")
    job_id = submit(client, command, outputs=["out.bin", "out.txt"])
    stack.wait_for(lambda: Job.objects.get(pk=job_id).log_size > 0, timeout=30)
    stack.stop_web()
    time.sleep(30)  # the job ends meanwhile: its reports, log and bundle wait on the agent's disk
    stack.start_web()
    stack.wait_for(lambda: state_of(job_id) == "released", timeout=90)
    job = client.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["outcome"] == "succeeded", job
    check_reports_once(job_id)
    assert check_log_once(stack, job_id) == b"".join(b"line %d\n" % i for i in range(1, 61))
    details = list(JobEvent.objects.filter(job_id=job_id).values_list("detail", flat=True))
    assert len(details) == len(set(details)), details
    check_bundle(client, job)
    assert sorted(f["path"] for f in job["bundle"]["files"]) == ["out.bin", "out.txt"]
    assert Lease.objects.get(job_id=job_id).charged
    check_meter(job_id)


def test_a_restarted_agent_takes_its_job_up_again(make_stack, api):
    stack = make_stack(loss_timeout_s=30)
    client = api(stack)
    command = "for i in $(seq 1 50); do echo line $i; sleep 0.1; done; echo done > out.txt"
    job_id = submit(client, command, outputs=["out.txt"])
    stack.wait_for(lambda: Job.objects.get(pk=job_id).log_size >= 40, timeout=30)
    stack.signal_agent("node-a", signal.SIGKILL)
    assert job_processes(job_id), "the job must outlive its agent"
    time.sleep(1)
    stack.start_agent("node-a")
    stack.wait_for(lambda: state_of(job_id) == "released", timeout=60)
    job = client.get(f"/api/v1/jobs/{job_id}/").json()
    assert (job["outcome"], job["attempts"]) == ("succeeded", 1), job
    check_reports_once(job_id)
    assert check_log_once(stack, job_id) == b"".join(b"line %d\n" % i for i in range(1, 51))
    check_bundle(client, job)
    check_meter(job_id)
