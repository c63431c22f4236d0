"""The reason of every end (issue 28 item 2): ``status_message`` is written at release in the job
page's words (:func:`apps.jobs.selectors.end_detail`), so the API and the CLI carry it too."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.jobs.models import Job
from apps.jobs.selectors import end_detail
from apps.jobs.services.cancel import job_cancel

from ..drive import Agent, queued_job, rented_job

pytestmark = pytest.mark.django_db


def _released(job: Job) -> Job:
    job = Job.objects.get(pk=job.pk)
    assert job.state == "released"
    assert job.status_message and job.status_message == end_detail(job)  # one set of words everywhere
    return job


def test_a_failed_exit_says_its_code(owner, pool):
    job = _released(Agent(rented_job(owner)).run(exit_code=3))
    assert job.outcome == "failed" and "3" in job.status_message


def test_a_time_limit_says_so(owner, pool):
    job = _released(Agent(rented_job(owner)).run(exit_code=None, reason="time_limit"))
    assert job.outcome == "timed_out" and "time limit" in job.status_message.lower()


def test_failed_staging_says_why(owner, pool):
    agent = Agent(rented_job(owner))
    agent.say("accepted")
    agent.say("exited", exit_code=None, reason="staging_failed", message="Install s3fs to access S3")
    agent.bundle({})
    agent.say("finished")
    job = _released(agent.job)
    assert job.outcome == "failed" and "s3fs" in job.status_message


def test_a_cancel_in_the_queue_and_while_running_says_so(owner, pool):
    queued = queued_job(owner)
    job_cancel(job=Job.objects.get(pk=queued.pk), by=owner)
    assert "cancel" in _released(queued).status_message.lower()
    agent = Agent(rented_job(owner))
    agent.start()
    job_cancel(job=Job.objects.get(pk=agent.job.pk), by=owner)
    job = agent.end(exit_code=None, reason="cancelled")
    job = _released(job)
    assert job.outcome == "cancelled" and "cancel" in job.status_message.lower()


def test_a_success_has_no_reason_and_the_api_carries_a_failure_s(owner, pool):
    ok = Agent(rented_job(owner)).run(exit_code=0)
    assert (ok.outcome, ok.status_message) == ("succeeded", "")
    failed = Agent(rented_job(owner)).run(exit_code=3)
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(f"/api/v1/jobs/{failed.pk}/").json()
    assert body["status_message"] == end_detail(Job.objects.get(pk=failed.pk)) != ""
    assert body["end_reason"] == "exit"
