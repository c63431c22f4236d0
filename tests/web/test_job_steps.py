"""The steps bar tells each outcome apart: no green check for a failure (issue 16)."""
import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from apps.artifacts.services import upload_create
from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.recovery import jobs_handle_node_loss
from apps.jobs.sources import source_words
from apps.scheduling.adapter import schedule_cycle
from apps.web.jobs.fragments import job_steps

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


# --- words beside the state (issue 16: doubled or stale words) ---------------------------------
def test_a_running_job_does_not_say_running_twice(user, node, web):
    agent = Agent(rented_job(user))
    agent.say("accepted")
    agent.say("running")
    html = web.get(f"/jobs/{agent.job.pk}/").content.decode()
    assert "— running" not in html and "Cost so far" in html


def test_a_job_released_by_node_loss_keeps_no_stale_progress_words(user, node, web, settings):
    settings.E31_MAX_ATTEMPTS = 1  # the loss releases the job instead of requeueing it
    agent = Agent(rented_job(user))
    agent.say("accepted")
    agent.say("running")
    jobs_handle_node_loss(node=agent.lease.node, at=timezone.now())
    job = Job.objects.get(pk=agent.job.pk)
    assert job.state == "released" and job.outcome == "node_lost" and "lost" in job.status_note  # the reason
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "— running" not in html and "Cost so far" not in html
    assert f"— {job.status_message}" not in html  # told in the end-detail alert, not again beside the state


def test_a_queued_job_says_why_it_waits_once(user, node, web):
    rented_job(user, name="holder", compute={"gpus": 4, "time_limit": "5m"})
    job = queued_job(user, compute={"gpus": 4, "time_limit": "5m"})
    schedule_cycle()
    job.refresh_from_db()
    assert job.pending_reason.startswith("waiting for")
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "Why it waits" in html and "Waiting for " in html
    assert "Waiting for</dt>" not in html and "Waiting for: waiting" not in html


def test_a_staging_failure_names_the_users_file_and_target_not_the_internal_id(user, node, web):
    upload = upload_create(owner=user, name="train.csv", fileobj=ContentFile(b"a,b\n1,2\n", name="train.csv"))
    agent = Agent(rented_job(user, data=[{"source": upload.source, "target": "data/"}]))
    agent.say("accepted")
    agent.say("exited", exit_code=None, reason="staging_failed",
              message=f"{upload.source}: sha256 mismatch: expected {'a' * 64} got {'b' * 64}")
    agent.bundle({})
    agent.say("finished")
    html = web.get(f"/jobs/{agent.job.pk}/").content.decode()
    assert f"{upload.source}: sha256" not in html  # (the spec shown below still holds the reference)
    assert 'staging failed: &quot;train.csv&quot; (to data/): sha256 mismatch' in html
    assert 'class="alert alert-error end-detail">Staging failed: &quot;train.csv&quot;' in html


def test_a_foreign_upload_reference_in_a_message_is_left_as_it_is(user, stranger_user, node):
    theirs = upload_create(owner=stranger_user, name="secret.csv", fileobj=ContentFile(b"x", name="secret.csv"))
    job = rented_job(user)
    assert source_words(job, f"{theirs.source}: not found") == f"{theirs.source}: not found"
