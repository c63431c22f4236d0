"""Retries on failure (issue 24 item 3, :mod:`apps.jobs.services.retries`): ``retry: {attempts, on}``
puts an ended attempt back in the queue, billed as any attempt; a cancel is final; without ``retry``
only a node loss is retried, as before."""
from __future__ import annotations

import pytest

from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.time_limits import jobs_enforce_time_limits
from apps.metering.models import Lease
from apps.pool.models import Node
from apps.pool.services import node_heartbeat, nodes_mark_lost

from ..drive import Agent, placed, queued_job

pytestmark = pytest.mark.django_db

RETRY_FAILED = {"attempts": 3, "on": ["failed"]}


def test_a_job_that_fails_twice_succeeds_on_its_third_attempt_and_each_is_billed(frozen_clock, owner, pool):
    job = queued_job(owner, retry=RETRY_FAILED)
    assert job.max_attempts == 3
    for attempt, code in ((1, 7), (2, 7), (3, 0)):
        job = placed(Job.objects.get(pk=job.pk))
        assert job.attempt == attempt
        job = Agent(job, frozen_clock).run(exit_code=code, run_s=10)
        if code:
            assert (job.state, job.attempt, job.outcome) == ("queued", attempt + 1, None)
            assert job.status_message == (f"retry {attempt + 1} of 3: attempt {attempt} failed "
                                          "(command exited with code 7)")
    assert (job.state, job.outcome, job.attempt) == ("released", "succeeded", 3)
    leases = Lease.objects.filter(job=job).order_by("attempt")
    assert [(lease.attempt, lease.charged, lease.billed_seconds) for lease in leases] == [
        (1, True, 10), (2, True, 10), (3, True, 10)]
    retried = [e.detail for e in job.events.filter(to_state="queued", from_state="output").order_by("seq")]
    assert retried == [f"attempt {k} failed (command exited with code 7); retried as attempt {k + 1} of 3"
                       for k in (1, 2)]


def test_the_last_attempt_s_failure_is_final(frozen_clock, owner, pool):
    job = queued_job(owner, retry={"attempts": 2, "on": ["failed"]})
    job = Agent(placed(job), frozen_clock).run(exit_code=1)
    job = Agent(placed(job), frozen_clock).run(exit_code=1)
    assert (job.state, job.outcome, job.attempt) == ("released", "failed", 2)
    assert job.status_message == "command exited with code 1"


def test_without_retry_a_failure_is_final(frozen_clock, owner, pool, settings):
    job = Agent(placed(queued_job(owner)), frozen_clock).run(exit_code=1)
    assert (job.state, job.outcome, job.max_attempts) == ("released", "failed", settings.E31_MAX_ATTEMPTS)


def test_a_time_limit_is_retried_when_asked_also_when_the_server_enforces_it(frozen_clock, owner, pool):
    job = queued_job(owner, retry={"attempts": 3, "on": ["timed_out"]}, compute={"gpus": 1, "time_limit": "60s"})
    job = Agent(placed(job), frozen_clock).run(exit_code=None, reason="time_limit", run_s=60)
    assert (job.state, job.attempt) == ("queued", 2)
    assert job.status_message == "retry 2 of 3: attempt 1 timed out (stopped at the time limit)"
    Agent(placed(job), frozen_clock).start()
    frozen_clock.advance(600)  # its agent says nothing: the server ends the run at the limit
    assert jobs_enforce_time_limits() == 1
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.attempt) == ("queued", 3)
    assert Lease.objects.get(job=job, attempt=2).billed_seconds == 60


def test_a_cancel_is_never_retried(frozen_clock, owner, pool):
    job = queued_job(owner, retry={"attempts": 3, "on": ["failed", "timed_out", "node_lost"]})
    agent = Agent(placed(job), frozen_clock)
    agent.start()
    job_cancel(job=Job.objects.get(pk=job.pk), by=owner)
    job = agent.end(exit_code=143, reason="cancelled", run_s=3)
    assert (job.state, job.outcome, job.attempt) == ("released", "cancelled", 1)


def test_one_attempt_is_not_retried_even_after_a_node_loss(frozen_clock, owner, pool):
    job = queued_job(owner, retry={"attempts": 1}, compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"})
    agent = Agent(placed(job), frozen_clock)
    agent.start()
    frozen_clock.advance(120)
    for other in Node.objects.exclude(pk=agent.lease.node_id):
        node_heartbeat(node=other)
    nodes_mark_lost()
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome, job.attempt) == ("released", "node_lost", 1)
