"""My jobs, the job page, its log, bundle and cancel; a stranger gets 404 everywhere."""
import re

import pytest
from django.utils.html import escape

from apps.jobs.models import Job
from apps.scheduling.adapter import schedule_cycle

from .factories import Agent, finished_job, queued_job, rented_job

pytestmark = pytest.mark.django_db


# --- My jobs ---------------------------------------------------------------
def test_it_lists_my_jobs_newest_first_and_not_anyone_elses(web, user, stranger_user, node):
    first = queued_job(user, name="first-job")
    second = queued_job(user, name="second-job")
    queued_job(stranger_user, name="someone-elses")
    html = web.get("/").content.decode()
    assert html.index("second-job") < html.index("first-job")
    assert f'href="/jobs/{first.pk}/"' in html and f'href="/jobs/{second.pk}/"' in html
    assert "someone-elses" not in html


def test_it_shows_state_in_words_queue_and_cost(web, user, node):
    finished_job(user, name="done-job")
    rented_job(user, name="holder", compute={"gpus": 4, "time_limit": "1h"})  # the node is full for an hour
    for name in ("ahead-1", "ahead-2", "waiting-job"):
        queued_job(user, name=name, compute={"gpus": 4, "time_limit": "1h"})
    schedule_cycle()  # the cycle places each in the queue and estimates its start
    job = Job.objects.get(name="waiting-job")
    assert job.queue_position == 3 and job.estimated_start_at is not None
    html = web.get("/").content.decode()
    assert "Queued" in html and "#3" in html and "starts ≈" in html
    assert "Released · Succeeded" in html
    assert "$0.00" in html


def test_it_filters_by_state(web, user, node):
    rented_job(user, name="now-rented")
    queued_job(user, name="still-queued")  # no cycle after it: it stays queued
    html = web.get("/?state=rented").content.decode()
    assert "now-rented" in html and "still-queued" not in html
    html = web.get("/?state=bogus").content.decode()
    assert "now-rented" in html and "still-queued" in html


def test_it_pages_by_fifty(frozen_clock, web, user, node):
    for i in reversed(range(51)):  # bulk-00 is the newest, a minute after bulk-01
        queued_job(user, name=f"bulk-{i:02d}")
        frozen_clock.advance(minutes=1)
    first = web.get("/").content.decode()
    assert "bulk-00" in first and "bulk-49" in first and "bulk-50" not in first
    assert "Page 1 of 2" in first and "page=2" in first
    second = web.get("/?page=2").content.decode()
    assert "bulk-50" in second and "bulk-00" not in second


def test_it_invites_a_new_user_to_submit(web):
    html = web.get("/").content.decode()
    assert "No jobs yet" in html
    assert 'href="/jobs/new/"' in html and "?example=training" in html


# --- the job page ------------------------------------------------------------
def test_the_page_of_a_queued_job_shows_its_place_and_why(web, user, node):
    rented_job(user, name="holder", compute={"gpus": 4, "time_limit": "5m"})
    queued_job(user, name="first-in-line", compute={"gpus": 4, "time_limit": "10m"})
    job = queued_job(user, name="in-line", compute={"gpus": 4, "time_limit": "10m"})
    schedule_cycle()
    job.refresh_from_db()
    assert job.queue_position == 2 and job.pending_reason
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "In the queue" in html and "#2" in html
    assert escape(job.pending_reason[0].upper() + job.pending_reason[1:]) in html  # capfirst
    assert "Cancel job" in html
    assert "submitted" in html  # the timeline's first event


def test_the_page_of_a_finished_job_shows_steps_leases_cost_log_and_bundle(web, user, node):
    job, archive = finished_job(user, name="all-done", log=b"epoch 1\nepoch 2\n",
                                files={"metrics.json": b"{}", "checkpoints/model.npz": b"x" * 100})
    lease = job.leases.get()
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "Released · Succeeded" in html
    for step in ("Submitted", "Rented", "Run started", "Run ended", "Released"):
        assert step in html
    assert "queued → rented" in html and "output → released" in html
    assert node.name in html and "H100-80GB" in html and "$2.49" in html
    assert f"${lease.cost_display}" in html
    assert "epoch 2" in html
    assert "metrics.json" in html and "checkpoints/model.npz" in html
    assert f'href="/jobs/{job.pk}/bundle/"' in html
    assert job.bundles.get().sha256 in html
    assert "Cancel job" not in html
    assert "command: echo hello" in html  # the spec as YAML


def test_a_running_job_shows_what_its_meter_has_run_up(web, user, node):
    job = rented_job(user)
    Agent(job).say("running")
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "Running" in html and "and counting" in html


def test_the_log_page_is_the_whole_log_as_text(web, user, node):
    job = rented_job(user)
    agent = Agent(job)
    head = b"first line\n"
    body = b"".join(b"line %06d ....................................\n" % i for i in range(2000))
    agent.log(head + body)
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "line 001999" in html
    assert "first line" not in html  # only the last 64 KB on the page
    assert "page back through the whole log" in html
    resp = web.get(f"/jobs/{job.pk}/log/")
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/plain")
    assert resp.content == head + body


def test_the_log_page_refuses_an_attempt_it_does_not_have(web, user, node):
    job = rented_job(user)
    assert web.get(f"/jobs/{job.pk}/log/?attempt=7").status_code == 400
    assert web.get(f"/jobs/{job.pk}/log/?attempt=x").status_code == 400


def test_the_bundle_downloads_whole_or_by_range(web, user, node):
    job, archive = finished_job(user, files={"out/a.txt": b"a" * 5000})
    resp = web.get(f"/jobs/{job.pk}/bundle/")
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content) == archive
    assert resp["Accept-Ranges"] == "bytes"
    part = web.get(f"/jobs/{job.pk}/bundle/", HTTP_RANGE="bytes=0-9")
    assert part.status_code == 206
    assert b"".join(part.streaming_content) == archive[:10]
    assert part["Content-Range"] == f"bytes 0-9/{len(archive)}"


def test_there_is_no_bundle_before_the_output_step(web, user, node):
    job = rented_job(user)
    assert web.get(f"/jobs/{job.pk}/bundle/").status_code == 404


def test_cancel_of_a_queued_job_releases_it_at_once(web, user, node):
    job = queued_job(user)
    resp = web.post(f"/jobs/{job.pk}/cancel/")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert (job.state, job.outcome) == ("released", "cancelled")
    html = web.get(resp["Location"]).content.decode()
    assert "Released · Cancelled" in html and "is cancelled" in html
    assert "Cancel job" not in html


def test_cancel_of_a_rented_job_asks_the_node(web, user, node):
    job = rented_job(user)
    web.post(f"/jobs/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.cancel_requested_at is not None and job.state == "rented"
    assert "cancel requested" in web.get(f"/jobs/{job.pk}/").content.decode()


def test_cancel_asks_to_confirm_on_a_page_that_works_without_js(web, user, node):
    job = rented_job(user, name="long-run")
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    link = re.search(r'<a class="button button-danger cancel-action" href="([^"]+)"[^>]*>Cancel job</a>', html, re.S)
    assert link and link.group(1) == f"/jobs/{job.pk}/cancel/"
    assert f'hx-post="/jobs/{job.pk}/cancel/"' in link.group(0) and "hx-confirm=" in link.group(0)
    page = web.get(link.group(1))
    assert page.status_code == 200
    confirm = page.content.decode()
    assert f"Cancel job {job.pk}?" in confirm and "It is billed up to the stop" in confirm
    assert f'<form method="post" action="/jobs/{job.pk}/cancel/"' in confirm
    job.refresh_from_db()
    assert job.cancel_requested_at is None and job.state == "rented"  # a GET cancels nothing
    web.post(f"/jobs/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.cancel_requested_at is not None


def test_the_confirm_page_of_a_queued_job_says_nothing_was_billed(web, user, node):
    job = queued_job(user)
    html = web.get(f"/jobs/{job.pk}/cancel/").content.decode()
    assert "Nothing has been billed" in html
    job.refresh_from_db()
    assert job.state == "queued"


def test_the_confirm_page_of_a_job_that_cannot_be_cancelled_goes_back(web, user, node):
    job, _ = finished_job(user)
    resp = web.get(f"/jobs/{job.pk}/cancel/")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert "released already" in web.get(resp["Location"]).content.decode()


def test_cancel_through_htmx_says_where_to_go(web, user, node):
    job = queued_job(user)
    resp = web.post(f"/jobs/{job.pk}/cancel/", headers={"HX-Request": "true"})
    assert resp.status_code == 204 and resp["HX-Redirect"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.state == "released"


def test_a_stranger_gets_no_confirm_page(stranger_web, user, node):
    job = queued_job(user)
    assert stranger_web.get(f"/jobs/{job.pk}/cancel/").status_code == 404


@pytest.mark.parametrize("path", ["", "log/", "bundle/"])
def test_a_stranger_gets_404(stranger_web, user, node, path):
    job, _ = finished_job(user, files={"secret.txt": b"secret"})
    assert stranger_web.get(f"/jobs/{job.pk}/{path}").status_code == 404


def test_a_stranger_cannot_cancel(stranger_web, user, node):
    job = queued_job(user)
    assert stranger_web.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    job.refresh_from_db()
    assert job.state == "queued"


def test_a_job_that_does_not_exist_is_404(web):
    assert web.get("/jobs/999999/").status_code == 404
