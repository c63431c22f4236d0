"""Job dependencies (SPEC §2 ``after``, §3; issue 25 item 7): a job waits, unbilled and out of the
plan, for jobs or arrays of its owner to succeed or to end; it is released ``cancelled`` with the
reason when that can no longer happen. Driven through the real services on the frozen clock."""
from __future__ import annotations

import pytest
from django.test import Client

from apps.jobs.arrays import array_cancel, array_submit
from apps.jobs.models import Job, JobArray, JobDependency
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.submit import job_submit
from apps.jobs.spec import SpecError
from apps.scheduling.adapter import schedule_cycle

from ..drive import Agent, placed, pool_drain, queued_job, rented_job, spec_doc

pytestmark = pytest.mark.django_db


def _fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def _waits(job: Job, reason: str) -> Job:
    """``job`` after a cycle: still queued, out of the plan, nothing rented or billed."""
    schedule_cycle()
    job = _fresh(job)
    assert job.state == "queued", job.status_message
    assert job.pending_reason == reason
    assert job.queue_position is None and job.estimated_start_at is None
    assert not job.leases.exists()
    return job


def test_a_chain_waits_with_its_reason_and_is_placed_after_its_dependency_succeeds(frozen_clock, owner, pool):
    a = rented_job(owner)
    b = queued_job(owner, after=[{"job": a.pk}])
    assert b.spec["after"] == [{"job": a.pk, "when": "succeeded"}]
    _waits(b, f"waiting for job {a.pk} to succeed")
    assert JobDependency.objects.get(job=b).on_job_id == a.pk
    frozen_clock.advance(60)
    Agent(a, frozen_clock).run(exit_code=0, run_s=30)
    b = placed(b)  # by the next cycle, at its time
    assert b.rented_at == frozen_clock.now()


def test_a_dependency_that_fails_releases_the_waiting_job_cancelled_with_the_reason(frozen_clock, owner, pool):
    a = rented_job(owner)
    b = queued_job(owner, after=[{"job": a.pk, "when": "succeeded"}])
    c = queued_job(owner, after=[{"job": b.pk}])  # a chain: c falls with b
    Agent(a, frozen_clock).run(exit_code=3, run_s=10)
    b, c = _fresh(b), _fresh(c)
    words = f"job {a.pk} failed: its dependency can no longer be met"
    assert (b.state, b.outcome, b.end_reason, b.status_message) == ("released", "cancelled", "cancelled", words)
    assert b.events.order_by("-seq").first().detail == words
    assert not b.leases.exists() and b.released_at == frozen_clock.now()
    assert (c.state, c.outcome) == ("released", "cancelled")
    assert c.status_message == f"job {b.pk} was cancelled: its dependency can no longer be met"


def test_the_release_itself_settles_the_waiting_job_without_a_cycle(frozen_clock, owner, pool, cycles):
    pool_drain()
    a = queued_job(owner)
    b = queued_job(owner, after=[{"job": a.pk}])
    _waits(b, f"waiting for job {a.pk} to succeed")
    ran = cycles.ran
    job_cancel(job=_fresh(a), by=owner)
    assert cycles.ran == ran  # no cycle ran: the job_released receiver did it, in the release's transaction
    b = _fresh(b)
    assert b.state == "released"
    assert b.status_message == f"job {a.pk} was cancelled: its dependency can no longer be met"


def test_when_ended_is_placed_after_its_dependency_fails(frozen_clock, owner, pool):
    a = rented_job(owner)
    b = queued_job(owner, after=[{"job": a.pk, "when": "ended"}])
    _waits(b, f"waiting for job {a.pk} to end")
    Agent(a, frozen_clock).run(exit_code=1, run_s=10)
    assert placed(b).outcome is None


def test_an_array_dependency_waits_for_every_task(frozen_clock, owner, pool):
    made = array_submit(owner=owner, document=spec_doc(array=2))
    evaluate = queued_job(owner, after=[{"array": made.array.pk}])
    _waits(evaluate, f"waiting for array {made.array.pk} to succeed")
    first, second = (Job.objects.get(pk=pk) for pk in made.job_ids)
    Agent(placed(first), frozen_clock).run(exit_code=0, run_s=10)
    _waits(evaluate, f"waiting for array {made.array.pk} to succeed")  # one task is not the array
    Agent(placed(second), frozen_clock).run(exit_code=0, run_s=10)
    placed(evaluate)


def test_an_array_with_a_failed_task_releases_its_dependent(frozen_clock, owner, pool):
    made = array_submit(owner=owner, document=spec_doc(array=2))
    evaluate = queued_job(owner, after=[{"array": made.array.pk}])
    Agent(placed(Job.objects.get(pk=made.job_ids[1])), frozen_clock).run(exit_code=2, run_s=10)
    evaluate = _fresh(evaluate)
    assert (evaluate.state, evaluate.outcome) == ("released", "cancelled")
    assert evaluate.status_message == (f"job {made.job_ids[1]} of array {made.array.pk} failed: "
                                       "its dependency can no longer be met")


def test_the_cycle_catches_a_release_that_sent_no_signal(frozen_clock, owner, pool):
    """An array's queued tasks cancelled in bulk send no ``job_released``: the cycle it asks for settles."""
    pool_drain()
    made = array_submit(owner=owner, document=spec_doc(array=3))
    evaluate = queued_job(owner, after=[{"array": made.array.pk, "when": "succeeded"}])
    array_cancel(array=made.array, by=owner)
    schedule_cycle()
    evaluate = _fresh(evaluate)
    assert (evaluate.state, evaluate.outcome) == ("released", "cancelled")
    assert f"of array {made.array.pk} was cancelled: its dependency can no longer be met" in evaluate.status_message


def test_an_array_can_wait_too_and_each_task_is_held(frozen_clock, owner, pool):
    a = rented_job(owner)
    made = array_submit(owner=owner, document=spec_doc(array=3, after=[{"job": a.pk}]))
    assert JobDependency.objects.filter(job__array=made.array, on_job=a).count() == 3
    assert JobArray.objects.get(pk=made.array.pk).spec["after"] == [{"job": a.pk, "when": "succeeded"}]
    for pk in made.job_ids:
        _waits(Job.objects.get(pk=pk), f"waiting for job {a.pk} to succeed")
    Agent(a, frozen_clock).run(exit_code=0, run_s=10)
    schedule_cycle()
    assert all(j.state == "rented" for j in Job.objects.filter(pk__in=made.job_ids))


def test_a_met_dependency_keeps_its_submit_time_as_its_queue_place(frozen_clock, owner, pool):
    """Once met, the job is planned by its submit time: ahead of a job submitted after it."""
    big = {"gpus": 4, "time_limit": "10m", "gpu_model": "H100-80GB"}
    a = rented_job(owner, compute={"gpus": 2, "time_limit": "10m", "gpu_model": "A100-40GB"})
    blocker = rented_job(owner, compute=big)
    b = queued_job(owner, compute=big, after=[{"job": a.pk}])
    frozen_clock.advance(5)
    later = queued_job(owner, compute=big)
    schedule_cycle()
    assert _fresh(later).queue_position == 1, (_fresh(later).state, _fresh(later).pending_reason)
    Agent(a, frozen_clock).run(exit_code=0, run_s=10)
    schedule_cycle()
    assert (_fresh(b).queue_position, _fresh(later).queue_position) == (1, 2)
    Agent(blocker, frozen_clock).run(exit_code=0, run_s=10)
    schedule_cycle()
    assert _fresh(b).state == "rented" and _fresh(later).state == "queued"


def test_only_the_submitters_own_jobs_and_arrays_may_be_named(owner, stranger, pool, api):
    theirs = job_submit(owner=stranger, document=spec_doc())
    their_array = array_submit(owner=stranger, document=spec_doc(array=2)).array
    mine = queued_job(owner)
    with pytest.raises(SpecError) as err:
        job_submit(owner=owner, document=spec_doc(after=[{"job": mine.pk}, {"job": theirs.pk},
                                                         {"array": their_array.pk}, {"job": 10**9}]))
    assert err.value.errors == {"after[1]": [f"You have no job {theirs.pk}."],
                                "after[2]": [f"You have no array {their_array.pk}."],
                                "after[3]": [f"You have no job {10**9}."]}
    resp = api.post("/api/v1/jobs/", spec_doc(after=[{"job": theirs.pk}]), format="json")
    assert resp.status_code == 400 and "after[0]" in resp.json(), resp.json()
    ok = api.post("/api/v1/jobs/", spec_doc(after=[{"job": mine.pk, "when": "ended"}]), format="json")
    assert ok.status_code == 201, ok.json()
    got = api.get(f"/api/v1/jobs/{ok.json()['id']}/").json()
    assert got["spec"]["after"] == [{"job": mine.pk, "when": "ended"}]  # the spec as stored


@pytest.mark.parametrize(("after", "field", "words"), [
    ([{"job": 1, "array": 2}], "after[0]", "one job"),
    ([{}], "after[0]", "one job"),
    ([{"job": 1, "when": "failed"}], "after[0].when", "succeeded"),
    ([{"job": "41"}], "after[0].job", "integer"),
    ([{"job": 0}], "after[0].job", "1"),
    ([{"job": 1, "then": 2}], "after[0].then", "Unknown"),
    ([{"job": 1}, {"job": 1}], "after", "twice"),
    ([{"job": i} for i in range(1, 102)], "after", "100"),
    ({"job": 1}, "after", "list"),
])
def test_a_malformed_after_is_a_400_naming_the_field(api, pool, after, field, words):
    resp = api.post("/api/v1/jobs/", spec_doc(after=after), format="json")
    assert resp.status_code == 400
    errors = resp.json()
    assert field in errors and words in " ".join(errors[field]), errors


def test_the_job_page_shows_the_chain_with_links(frozen_clock, owner, pool):
    a = rented_job(owner)
    made = array_submit(owner=owner, document=spec_doc(array=2))
    b = queued_job(owner, after=[{"job": a.pk}, {"array": made.array.pk, "when": "ended"}])
    schedule_cycle()
    web = Client()
    web.force_login(owner)
    html = web.get(f"/jobs/{b.pk}/").content.decode()
    assert f'<a href="/jobs/{a.pk}/">after job {a.pk}</a> (succeeded)' in html
    assert f'<a href="/arrays/{made.array.pk}/">after array {made.array.pk}</a> (ended)' in html
    assert f"Waiting for job {a.pk} to succeed (and 1 more)" in html
    assert "none until its dependencies are met" in html
    upstream = web.get(f"/jobs/{a.pk}/").content.decode()
    assert f'<a href="/jobs/{b.pk}/">job {b.pk}</a>' in upstream  # what waits for it
    task = web.get(f"/jobs/{made.job_ids[0]}/").content.decode()
    assert f'<a href="/jobs/{b.pk}/">job {b.pk}</a>' in task


def test_the_admin_shows_a_jobs_entries(admin_client, owner, pool):
    a = queued_job(owner)
    b = queued_job(owner, after=[{"job": a.pk, "when": "ended"}])
    html = admin_client.get(f"/admin/jobs/job/{b.pk}/change/").content.decode()
    assert f"job {a.pk}" in html and "ended" in html
