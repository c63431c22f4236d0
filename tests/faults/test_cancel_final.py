"""Issue 12 case 2: a cancel is not lost when the node is lost. Cancel a running job whose agent
is frozen: the node is declared down, and the job ends cancelled, never requeued or rented again."""
from __future__ import annotations

import signal

import pytest

from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.e2e.test_faults import state_of, submit, wait_until
from tests.e2e.test_five_steps import token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_a_cancel_survives_the_loss_of_the_node(stack_with):
    stack = stack_with(loss_timeout_s=4, agents=[("node-a", "1xH100-80GB"), ("node-b", "1xH100-80GB")])
    client = token_client(stack.url, UserFactory(username="canceller"))
    job_id = submit(client, "sleep 300")
    stack.wait_for(lambda: state_of(job_id) == "running", timeout=30)
    node = Lease.objects.get(job_id=job_id).node.name
    stack.signal_agent(node, signal.SIGSTOP)
    answer = client.post(f"/api/v1/jobs/{job_id}/cancel/").json()
    assert answer["cancel"]["effect"] == "stopping"
    again = client.post(f"/api/v1/jobs/{job_id}/cancel/").json()
    assert again["cancel"]["effect"] == "already_stopping"

    assert wait_until(lambda: state_of(job_id) == "released", 60)
    job = Job.objects.get(pk=job_id)
    assert (job.outcome, job.attempt) == ("cancelled", 1)
    assert Lease.objects.filter(job_id=job_id).count() == 1  # never rented again on the other node
    assert not Lease.objects.filter(job_id=job_id, charged=True).exists()
    stack.signal_agent(node, signal.SIGCONT)
