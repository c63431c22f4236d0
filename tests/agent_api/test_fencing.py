"""Fencing through the agent's HTTP calls (SPEC §4, §6): an attempt the server ended is a stop
in every answer that still lists it; its GPUs stay held, unbilled, until the node confirms the
stop or is declared down; ``meter_check`` sees a GPU given before the fence lifted."""

import pytest
from rest_framework.test import APIClient

from apps.jobs.services.submit import job_submit
from apps.jobs.services.time_limits import jobs_enforce_time_limits
from apps.metering.checks import meter_violations
from apps.metering.models import Lease, LeaseGpu
from apps.pool.services import node_token_issue, nodes_mark_lost
from apps.scheduling.adapter import schedule_cycle

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='node-f')}")
    inventory = {"hostname": "host-f", "gpus": [{"index": 0, "uuid": "GPU-f0", "model": "L4-24GB",
                                                  "memory_mb": 24000}],
                 "cpus": 8, "memory_bytes": 64 * 10**9, "simulated": True}
    answer = client.post("/api/v1/agent/register/", inventory, format="json").json()
    assert answer["node_loss_timeout_s"] > 0
    return client


def _submit(owner, limit="1m"):
    job = job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": limit, "gpu_model": ["L4"]}))
    schedule_cycle()
    return job


def _past_limit(clock, seconds=120):
    """``seconds`` pass on the frozen clock: a job of a minute rented now is past its limit."""
    clock.advance(seconds)


def _beat(agent, *refs):
    resp = agent.post("/api/v1/agent/heartbeat/", {"running": list(refs)}, format="json")
    assert resp.status_code == 200
    return resp.json()["cancel"]


def test_an_ended_attempt_is_a_stop_until_the_node_confirms_and_its_gpu_waits(frozen_clock, owner, agent, settings):
    settings.E31_HEARTBEAT_S = 0  # a fence may be confirmed by the very next heartbeat
    first = _submit(owner)
    ref = {"job_id": first.pk, "attempt": 1}
    assert agent.get("/api/v1/agent/work/?wait=0").json()["assignments"][0]["grace_s"] == 6.0  # 10 % of 1 m
    agent.post("/api/v1/agent/reports/", {"reports": [{**ref, "seq": 1, "type": "running"}]}, format="json")
    _past_limit(frozen_clock)
    assert jobs_enforce_time_limits(grace_s=0) == 1
    lease = Lease.objects.get(job=first)
    assert lease.fenced_at and lease.billed_seconds == 60 and LeaseGpu.objects.filter(lease=lease, open=True).exists()

    second = _submit(owner)
    assert _beat(agent, ref) == [ref]
    assert _beat(agent, ref) == [ref]  # as often as it lists it
    assert agent.get(f"/api/v1/agent/work/?wait=0&have={first.pk}.1").json()["cancel"] == [ref]
    schedule_cycle()
    assert not Lease.objects.filter(job=second).exists()
    assert meter_violations() == []

    assert _beat(agent) == []  # confirmed: the fence lifts, the GPU goes to the waiting job
    lease.refresh_from_db()
    assert lease.fence_lifted_at is not None
    schedule_cycle()
    assert Lease.objects.get(job=second).rented_at >= lease.fence_lifted_at
    assert meter_violations() == []


def test_a_node_declared_down_lifts_its_fences(frozen_clock, owner, agent, settings):
    first = _submit(owner)
    _past_limit(frozen_clock)
    jobs_enforce_time_limits(grace_s=0)
    settings.E31_NODE_LOSS_TIMEOUT_S = 1
    frozen_clock.advance(5)  # node-f says nothing more
    assert nodes_mark_lost()
    lease = Lease.objects.get(job=first)
    assert lease.fence_lifted_at is not None and not LeaseGpu.objects.filter(lease=lease, open=True).exists()


def test_meter_check_names_a_gpu_given_before_its_fence_lifted(frozen_clock, owner, agent):
    first = _submit(owner)
    _past_limit(frozen_clock)
    jobs_enforce_time_limits(grace_s=0)
    fenced = Lease.objects.get(job=first)
    # forge what fencing forbids: the GPU given to another job while still fenced
    LeaseGpu.objects.filter(lease=fenced).update(open=False)
    second = _submit(owner)
    assert Lease.objects.filter(job=second).exists()
    frozen_clock.advance(1)  # the fenced hold lasts until now: a second of it overlaps the second lease
    assert any(v.kind == "gpu-overlap" for v in meter_violations())
