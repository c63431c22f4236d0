"""Issue 12 case 3: fencing. An attempt the server has ended comes back to its node as a stop
until the node confirms it; its GPUs go to no other job before that (or before the node is
declared down); a run whose agent is gone stops itself within the node-loss timeout."""
from __future__ import annotations

import signal
import time

import httpx
import pytest

from apps.jobs.models import Job
from apps.jobs.services.time_limits import jobs_enforce_time_limits
from apps.metering.models import Lease, LeaseGpu
from apps.pool.services import node_token_issue
from tests.e2e.test_faults import FAST, MARKER_VAR, job_processes, state_of, submit, wait_until
from tests.e2e.test_five_steps import token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def attempt_processes(job_id: int, attempt: int) -> list:
    return [p for p in job_processes(job_id) if f":{job_id}:{attempt}:" in p.environ().get(MARKER_VAR, "")]


def test_a_killed_agent_leaves_no_ghost_run(stack_with):
    loss = 4
    stack = stack_with(loss_timeout_s=loss, agents=[("node-a", "1xH100-80GB"), ("node-b", "1xH100-80GB")])
    client = token_client(stack.url, UserFactory(username="ghostbuster"))
    job_id = submit(client, "sleep 300")
    stack.wait_for(lambda: state_of(job_id) == "running", timeout=30)
    first = Lease.objects.get(job_id=job_id).node.name
    assert attempt_processes(job_id, 1)
    stack.signal_agent(first, signal.SIGKILL)
    killed = time.monotonic()

    # the server requeues the job and it starts on the other node ...
    stack.wait_for(lambda: Lease.objects.filter(job_id=job_id, attempt=2).exists(), timeout=30)
    second = Lease.objects.get(job_id=job_id, attempt=2)
    assert second.node.name != first
    stack.wait_for(lambda: client.get(f"/api/v1/jobs/{job_id}/").json()["state"] == "running", timeout=30)
    # ... and the first run stopped itself: its shim heard nothing from its agent for the loss timeout
    grace = float(FAST["E31_GRACE_S"])
    assert wait_until(lambda: not attempt_processes(job_id, 1), loss + grace + 10)
    assert time.monotonic() - killed <= loss + grace + 10
    assert attempt_processes(job_id, 2)
    lost = Lease.objects.get(job_id=job_id, attempt=1)
    assert (lost.end_reason, lost.charged) == ("node_lost", False) and lost.released_at is not None

    client.post(f"/api/v1/jobs/{job_id}/cancel/")
    stack.wait_for(lambda: state_of(job_id) == "released", timeout=30)
    assert Job.objects.get(pk=job_id).outcome == "cancelled"


def test_a_frozen_agent_past_the_limit_gets_the_stop_and_its_gpu_waits_for_it(stack_with):
    stack = stack_with(loss_timeout_s=90)  # longer than limit + the server's slack: not a node loss
    client = token_client(stack.url, UserFactory(username="frozen"))
    first = submit(client, "sleep 1000", limit="3s")
    stack.wait_for(lambda: state_of(first) == "running", timeout=30)
    stack.signal_agent("node-a", signal.SIGSTOP)
    try:
        waiting = submit(client, "echo next")  # wants node-a's only GPU
        # the server ends the first job at its limit (grace + 30 s without word from the agent) ...
        stack.wait_for(lambda: state_of(first) == "released", timeout=int(FAST["E31_GRACE_S"]) + 30 + 20)
        fenced = Lease.objects.get(job_id=first)
        assert fenced.fenced_at is not None and fenced.fence_lifted_at is None
        # ... but its GPU is fenced: several cycles, and the waiting job is not placed on it
        time.sleep(4)
        assert state_of(waiting) == "queued" and not Lease.objects.filter(job_id=waiting).exists()
        assert LeaseGpu.objects.filter(lease=fenced, open=True).exists()
        pool = client.get("/api/v1/pool/").json()
        assert sum(row["free"] for row in pool) == 0
    finally:
        thawed = time.time()
        stack.signal_agent("node-a", signal.SIGCONT)
    # the thawed agent's heartbeat gets the stop; once it no longer lists the run, the GPU is free
    stack.wait_for(lambda: state_of(waiting) == "released", timeout=30)
    assert job_processes(first) == []
    fenced.refresh_from_db()
    assert fenced.fence_lifted_at is not None and fenced.fence_lifted_at.timestamp() >= thawed
    nxt = Lease.objects.get(job_id=waiting)
    assert nxt.rented_at >= fenced.fence_lifted_at
    job = Job.objects.get(pk=first)
    assert (job.outcome, job.end_reason) == ("timed_out", "time_limit")
    assert fenced.billed_seconds == 3 and fenced.charged  # the fence is not billed
    assert Job.objects.get(pk=waiting).outcome == "succeeded"


def _scripted_agent(url: str, name: str) -> httpx.Client:
    """A node that is only plain HTTP calls: registers one A100 and answers nothing else by itself."""
    agent = httpx.Client(base_url=url, headers={"Authorization": f"Node {node_token_issue(name=name)}"},
                         timeout=30)
    resp = agent.post("/api/v1/agent/register/", json={
        "hostname": name, "cpus": 8, "memory_bytes": 64 << 30, "simulated": True, "sandboxed": True,
        "gpus": [{"index": 0, "uuid": f"GPU-{name}-0", "model": "A100-40GB", "memory_mb": 40960}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["node_loss_timeout_s"] == 30
    return agent


def _submit_a100(client: httpx.Client, command: str, limit: str = "3s") -> int:
    doc = {"name": "scripted", "work": {"command": command},
           "compute": {"gpus": 1, "gpu_model": "A100", "time_limit": limit}}
    resp = client.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def test_a_node_that_keeps_listing_an_ended_attempt_keeps_getting_the_stop(stack_with):
    stack = stack_with(loss_timeout_s=30)
    agent = _scripted_agent(stack.url, "node-s")
    client = token_client(stack.url, UserFactory(username="scripted"))
    job_id = _submit_a100(client, "sleep 1000")
    stack.wait_for(lambda: Lease.objects.filter(job_id=job_id).exists(), timeout=30)
    work = agent.get("/api/v1/agent/work/?wait=0").json()
    assert [a["job_id"] for a in work["assignments"]] == [job_id]
    assert work["assignments"][0]["grace_s"] == pytest.approx(0.3)  # 10 % of the 3 s limit
    ref = {"job_id": job_id, "attempt": 1}
    report = agent.post("/api/v1/agent/reports/", json={"reports": [{**ref, "seq": 1, "type": "running", "pid": 7}]})
    assert report.json()["results"][0]["status"] == 200
    assert agent.post("/api/v1/agent/heartbeat/", json={"running": [ref]}).json()["cancel"] == []

    time.sleep(3.2)
    assert jobs_enforce_time_limits(grace_s=0) == 1  # the server ends the attempt on its own
    assert state_of(job_id) == "released"
    later = _submit_a100(client, "true", limit="1m")  # wants the same GPU
    for _ in range(4):  # the node keeps listing it: every answer says stop, the GPU stays held
        answer = agent.post("/api/v1/agent/heartbeat/", json={"running": [ref]}).json()
        assert ref in answer["cancel"]
        assert ref in agent.get(f"/api/v1/agent/work/?wait=0&have={job_id}.1").json()["cancel"]
        time.sleep(1)
    assert not Lease.objects.filter(job_id=later).exists() and state_of(later) == "queued"
    lease = Lease.objects.get(job_id=job_id)
    assert lease.fenced_at is not None and lease.fence_lifted_at is None
    assert (lease.billed_seconds, lease.end_reason, lease.charged) == (3, "time_limit", True)
    # a report of the ended attempt is refused as stale
    stale = agent.post("/api/v1/agent/reports/", json={"reports": [{**ref, "seq": 2, "type": "finished",
                                                                     "exited": {"exit_code": 0, "reason": "exit"}}]})
    assert stale.json()["results"][0]["status"] == 409

    # the node confirms the stop (no longer lists it): the fence lifts, the waiting job is placed
    assert agent.post("/api/v1/agent/heartbeat/", json={"running": []}).json()["cancel"] == []
    lease.refresh_from_db()
    assert lease.fence_lifted_at is not None
    stack.wait_for(lambda: Lease.objects.filter(job_id=later).exists(), timeout=15)
    assert Lease.objects.get(job_id=later).rented_at >= lease.fence_lifted_at
    nxt = {"job_id": later, "attempt": 1}
    done = agent.post("/api/v1/agent/reports/", json={"reports": [
        {**nxt, "seq": 1, "type": "running", "pid": 8},
        {**nxt, "seq": 2, "type": "finished", "exited": {"exit_code": 0, "reason": "exit"}}]}).json()
    assert [r["status"] for r in done["results"]] == [200, 200]
    assert Job.objects.get(pk=later).outcome == "succeeded"
