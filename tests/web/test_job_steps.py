"""The steps bar tells each outcome apart: no green check for a failure (issue 16)."""
import pytest

from apps.jobs.fragments import job_steps
from apps.jobs.models import Job
from apps.jobs.services import job_cancel

from .factories import Agent, finished_job, queued_job, rented_job

pytestmark = pytest.mark.django_db


def _marks(job: Job) -> list[tuple[str, str, str]]:
    return [(s.label, s.status, s.icon) for s in job_steps(Job.objects.get(pk=job.pk))]


def test_a_succeeded_job_has_five_checks(user, node):
    job, _ = finished_job(user)
    assert [(status, icon) for _, status, icon in _marks(job)] == [("done", "check")] * 5


def test_a_failed_run_ends_on_a_cross_not_a_check(user, node, web):
    job, _ = finished_job(user, exit_code=3)
    marks = _marks(job)
    assert marks[-1] == ("Released · Failed", "ended", "failed")
    assert [status for _, status, _ in marks[:4]] == ["done"] * 4
    assert "step-ended" in web.get(f"/jobs/{job.pk}/").content.decode()


def test_a_timed_out_run_ends_on_its_own_mark(user, node):
    job = Agent(rented_job(user)).run(exit_code=None, reason="time_limit")
    assert _marks(job)[-1] == ("Released · Timed out", "ended", "timed_out")


def test_staging_failure_never_shows_the_run_as_ended(user, node):
    agent = Agent(rented_job(user))
    agent.say("accepted")
    agent.say("exited", exit_code=None, reason="staging_failed", message="input not found")
    agent.bundle({})
    agent.say("finished")
    marks = _marks(agent.job)
    assert marks[2][:2] == ("Run started", "skipped") and marks[3][:2] == ("Run ended", "skipped")
    assert marks[-1][1] == "ended"


def test_a_job_cancelled_in_the_queue_skips_the_middle_steps(user, node):
    job = queued_job(user)
    job_cancel(job=job, by=user)
    marks = _marks(job)
    assert [status for _, status, _ in marks] == ["done", "skipped", "skipped", "skipped", "ended"]
    assert marks[-1] == ("Released · Cancelled", "ended", "cancelled")
