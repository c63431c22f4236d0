"""One clock (issue 22, SPEC §4): services read :func:`apps.core.clock.now`, which the tests' frozen clock
stops, and the services of jobs take ``now=`` from a caller that knows the time better."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core import clock
from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.recovery import jobs_reconcile_heartbeat
from apps.jobs.services.submit import job_submit
from apps.jobs.services.time_limits import jobs_enforce_time_limits
from apps.metering.models import Lease

from ..clock import T0
from ..drive import Agent, pool_drain, rented_job, spec_doc


def test_the_frozen_clock_stops_the_one_clock(frozen_clock):
    assert clock.now() == timezone.now() == T0
    assert frozen_clock.advance(90) == clock.now() == T0 + timedelta(seconds=90)
    assert clock.now().tzinfo is not None and clock.now().utcoffset() == timedelta(0)


@pytest.mark.django_db
def test_a_submit_and_a_cancel_stamp_the_time_they_are_given(frozen_clock, owner, pool):
    pool_drain()  # it stays queued
    submitted, cancelled = T0 - timedelta(minutes=5), T0 - timedelta(minutes=2)

    job = job_submit(owner=owner, document=spec_doc(), now=submitted)
    job = job_cancel(job=job, by=owner, now=cancelled)

    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome) == ("released", "cancelled")
    assert (job.submitted_at, job.cancel_requested_at, job.released_at) == (submitted, cancelled, cancelled)
    assert [e.at for e in job.events.order_by("seq")] == [submitted, cancelled]


@pytest.mark.django_db
def test_the_time_limit_check_acts_at_the_time_it_is_given(frozen_clock, owner, pool):
    job = rented_job(owner, compute={"gpus": 1, "time_limit": "60s"})
    Agent(job).start()

    assert jobs_enforce_time_limits(now=T0 + timedelta(seconds=60)) == 0  # within the grace
    assert jobs_enforce_time_limits(now=T0 + timedelta(hours=1)) == 1

    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome, job.released_at) == ("released", "timed_out", T0 + timedelta(hours=1))
    assert Lease.objects.get(job=job).billed_seconds == 60


@pytest.mark.django_db
def test_a_heartbeat_reconciles_at_the_time_it_is_given(frozen_clock, owner, pool):
    agent = Agent(rented_job(owner))
    agent.start()
    node = agent.lease.node

    assert jobs_reconcile_heartbeat(node=node, running=[], min_age_s=20, now=T0 + timedelta(seconds=10)) == 0
    assert jobs_reconcile_heartbeat(node=node, running=[], min_age_s=20, now=T0 + timedelta(seconds=30)) == 1

    lease = Lease.objects.get(pk=agent.lease.pk)
    assert Job.objects.get(pk=agent.job.pk).attempt == 2
    assert (lease.charged, lease.released_at) == (False, T0 + timedelta(seconds=30))
