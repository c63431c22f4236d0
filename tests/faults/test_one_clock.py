"""Issue 12 case 6: outages are not billed to the customer. Every web process stops as a short job
ends; its ``exited`` waits on the agent's disk for the outage; the run is billed, not the outage
(SPEC §4, one clock: the agent's measured run length bounds the end)."""
from __future__ import annotations

import time

import pytest

from apps.agent_api.models import AgentReport
from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.e2e.test_faults import state_of, submit, wait_until
from tests.e2e.test_five_steps import check_meter, token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
OUTAGE_S = 20


def test_a_web_outage_at_the_end_of_a_run_is_not_billed(stack_with):
    stack = stack_with(loss_timeout_s=90)  # the outage stays under the node-loss timeout
    client = token_client(stack.url, UserFactory(username="outage"))
    job_id = submit(client, "sleep 3")
    stack.wait_for(lambda: state_of(job_id) == "running", timeout=30)
    stack.stop_web()
    down = time.monotonic()
    time.sleep(OUTAGE_S)  # the run ends about 3 s in; its report waits on the agent's disk
    stack.start_web()
    assert wait_until(lambda: state_of(job_id) == "released", 60)
    assert time.monotonic() - down >= OUTAGE_S

    job = Job.objects.get(pk=job_id)
    assert job.outcome == "succeeded"
    lease = Lease.objects.get(job_id=job_id)
    # what the user pays: the 3 s run (plus the accept-to-start moments), not the 20 s outage
    assert 3 <= lease.billed_seconds <= 6, lease.billed_seconds
    assert lease.charged
    assert job.run_ended_at == lease.run_ended_at
    assert (job.run_ended_at - job.run_started_at).total_seconds() < 6
    # the server heard of the end only after the outage; the agent said how long the run took
    end = AgentReport.objects.get(job_id=job_id, type="finished")
    assert (end.received_at - lease.rented_at).total_seconds() >= OUTAGE_S - 5
    assert 3 <= end.payload["exited"]["elapsed_s"] < 6
    assert lease.released_at >= end.received_at  # the GPUs came back when the server heard
    check_meter(job_id)
