"""Outcomes and the meter through the services the agent endpoints call (SPEC §3, §4)."""

import pytest

from apps.agent_api.reports import agent_report
from apps.core.choices import JobState
from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.recovery import jobs_reconcile_heartbeat
from apps.jobs.services.submit import job_submit
from apps.jobs.services.time_limits import jobs_enforce_time_limits
from apps.jobs.state import TransitionError, transition
from apps.metering.models import Lease, LeaseGpu
from apps.pool.models import Node
from apps.pool.services import node_heartbeat, nodes_mark_lost

from ..drive import Agent
from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


def submit(owner, **compute):
    return job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": "10m", **compute}))


def test_it_succeeds_on_exit_zero_and_frees_the_gpus(owner, pool):
    job = Agent(submit(owner)).run()
    assert (job.state, job.outcome) == ("released", "succeeded")
    assert not LeaseGpu.objects.filter(open=True).exists()


def test_it_fails_on_nonzero_exit(owner, pool):
    job = Agent(submit(owner)).run(exit_code=3)
    assert (job.outcome, job.exit_code) == ("failed", 3)


def test_it_times_out_and_bills_exactly_the_limit(frozen_clock, owner, pool):
    job = submit(owner, time_limit="90s")
    job = Agent(job, frozen_clock).run(exit_code=None, reason="time_limit", run_s=200)  # its report comes late
    assert job.outcome == "timed_out"
    assert Lease.objects.get(job=job).billed_seconds == 90


def test_cancelling_a_queued_job_bills_nothing(owner, pool):
    blockers = [submit(owner, gpus=4, gpu_model=["H100"]) for _ in range(1)]
    queued = submit(owner, gpus=4, gpu_model=["H100"])
    assert Job.objects.get(pk=queued.pk).state == "queued"
    job = job_cancel(job=queued)
    assert (job.state, job.outcome) == ("released", "cancelled")
    assert not Lease.objects.filter(job=job).exists()
    assert blockers[0].leases.count() == 1


def test_a_queued_job_has_a_position_estimate_and_reason(owner, pool):
    submit(owner, gpus=4, gpu_model=["H100"])
    waiting = Job.objects.get(pk=submit(owner, gpus=4, gpu_model=["H100"]).pk)
    assert waiting.queue_position == 1
    assert waiting.estimated_start_at is not None
    assert "waiting for 4 H100 on one node" in waiting.pending_reason


def test_cancelling_a_running_job_stops_through_the_agent_and_bills_to_the_stop(owner, pool):
    agent = Agent(submit(owner))
    agent.say("accepted")
    agent.say("running")
    job_cancel(job=agent.job)
    from apps.agent_api.selectors import agent_work_for

    assert agent_work_for(agent.lease.node)["cancel"] == [{"job_id": agent.job.pk, "attempt": 1}]
    agent.say("exited", exit_code=-15, reason="cancelled")
    agent.say("finished")
    job = Job.objects.get(pk=agent.job.pk)
    assert job.outcome == "cancelled"
    assert Lease.objects.get(job=job).billed_seconds is not None


def test_a_duplicate_report_changes_nothing(owner, pool):
    agent = Agent(submit(owner))
    agent.say("accepted")
    agent.say("running")
    agent.say("exited", exit_code=0, reason="exit")
    lease = Lease.objects.get(job=agent.job)
    assert agent_report(node=lease.node, job_id=agent.job.pk,
                        report={"attempt": 1, "seq": 3, "type": "exited", "exit_code": 0}) is False
    assert Lease.objects.get(pk=lease.pk).billed_seconds == lease.billed_seconds


def test_the_state_machine_refuses_moves_it_does_not_allow(owner, pool):
    job = Agent(submit(owner)).run()
    with pytest.raises(TransitionError):
        transition(job, JobState.RUNNING)


def _silent_for(seconds: float, clock, *, only: Node) -> None:
    """``seconds`` pass and only ``only`` stays silent: every other node's agent sends a heartbeat."""
    clock.advance(seconds)
    for other in Node.objects.exclude(pk=only.pk):
        node_heartbeat(node=other)


def test_a_lost_node_requeues_its_job_then_releases_it_node_lost(frozen_clock, owner, pool, settings):
    job = submit(owner, gpus=4, gpu_model=["H100"])
    agent = Agent(job)
    agent.start()
    node = agent.lease.node
    _silent_for(120, frozen_clock, only=node)
    nodes_mark_lost()
    job = Job.objects.get(pk=job.pk)
    lease = Lease.objects.get(pk=agent.lease.pk)
    assert (job.state, job.attempt) == ("queued", 2)
    assert lease.charged is False and lease.released_at is not None
    assert job.events.filter(detail__contains="lost").exists()


def test_the_server_ends_a_run_past_its_time_limit_on_its_own(frozen_clock, owner, pool):
    job = submit(owner, time_limit="60s")
    Agent(job).start()
    frozen_clock.advance(600)  # and the agent says nothing
    assert jobs_enforce_time_limits() == 1
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome) == ("released", "timed_out")
    assert Lease.objects.get(job=job).billed_seconds == 60


def test_jobs_an_agent_no_longer_lists_are_requeued_uncharged(frozen_clock, owner, pool):
    agent = Agent(submit(owner))
    agent.start()
    node = agent.lease.node
    assert jobs_reconcile_heartbeat(node=node, running=[{"job_id": agent.job.pk, "attempt": 1}], min_age_s=0) == 0
    frozen_clock.advance(60)
    assert jobs_reconcile_heartbeat(node=node, running=[], min_age_s=20) == 1
    job = Job.objects.get(pk=agent.job.pk)
    assert job.attempt == 2 and Lease.objects.get(pk=agent.lease.pk).charged is False


def test_a_lost_node_ends_the_other_ranks_of_a_gang_uncharged(frozen_clock, owner, pool):
    job = submit(owner, gpus=1, nodes=2, mixed_models=True)  # the pool: one H100 node, one A100 node
    leases = list(Lease.objects.filter(job=job))
    assert len(leases) == 2
    lost = leases[0].node
    _silent_for(120, frozen_clock, only=lost)
    nodes_mark_lost()
    assert {(lease.charged, lease.released_at is not None) for lease in Lease.objects.filter(job=job)} == {
        (False, True)}
    assert Job.objects.get(pk=job.pk).state == "queued"


def test_a_cancel_is_final_even_when_the_node_is_then_lost(frozen_clock, owner, pool, api):
    """Issue 12 item 3: cancel a running job whose agent froze; the node is lost: the job ends
    cancelled (not requeued, never rented again), the lease uncharged; a second cancel says so."""
    job = submit(owner, gpus=4, gpu_model=["H100"])
    agent = Agent(job)
    agent.start()
    first = api.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["cancel"]
    assert first["effect"] == "stopping"
    second = api.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["cancel"]
    assert second["effect"] == "already_stopping" and "already" in second["detail"]
    _silent_for(120, frozen_clock, only=agent.lease.node)  # its agent froze
    nodes_mark_lost()
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome, job.attempt) == ("released", "cancelled", 1)
    assert not Lease.objects.filter(job=job, charged=True).exists()
    assert Lease.objects.filter(job=job).count() == 1  # never rented again
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["cancel"]["effect"] == "already_released"


def test_declared_outputs_without_a_verified_bundle_are_never_a_success(owner, pool):
    """Issue 12 item 9: an agent that says ``finished`` with no bundle (refused, or never sent)
    leaves the job failed, its outcome saying the output was not delivered."""
    agent = Agent(submit(owner))
    agent.say("accepted")
    agent.say("running")
    agent.say("exited", exit_code=0, reason="exit")
    agent.say("finished")
    job = Job.objects.get(pk=agent.job.pk)
    assert (job.state, job.outcome) == ("released", "failed")
    assert "output not delivered" in job.status_message
    assert job.events.filter(detail__contains="output not delivered").exists()


def test_a_job_without_declared_outputs_succeeds_with_no_bundle(owner, pool):
    job = job_submit(owner=owner, document=spec(output={"paths": []}))
    agent = Agent(job)
    for type_, extra in (("accepted", {}), ("running", {}), ("exited", {"exit_code": 0, "reason": "exit"}),
                         ("finished", {})):
        agent.say(type_, **extra)
    assert Job.objects.get(pk=job.pk).outcome == "succeeded"
