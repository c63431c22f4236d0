"""My jobs (issue 16 item 6): search by name, filters, the GPUs and "Ran" columns, bulk cancel."""
from __future__ import annotations

import re

import pytest

from apps.jobs.models import Job
from apps.jobs.selectors import JobFilter, job_filter_parse, jobs_search
from apps.jobs.services.cancel import BULK_CANCEL_MAX, BulkCancelError, bulk_ids_parse, jobs_cancel_bulk
from apps.web.jobs.fragments import list_row_context, render_row, run_duration

from ..drive import pool_drain
from .factories import Agent, finished_job, node_with_gpus, queued_job, rented_job

pytestmark = pytest.mark.django_db


def row_of(html: str, job: Job) -> str:
    match = re.search(rf'<tr id="job-row-{job.pk}".*?</tr>', html, re.S)
    assert match, f"no row for job {job.pk}"
    return match.group(0)


# --- search and filters ------------------------------------------------------
def test_the_selector_searches_names_case_insensitively_and_only_mine(user, stranger_user, node):
    mine = queued_job(user, name="Train-ResNet")
    queued_job(user, name="eval-bert")
    queued_job(stranger_user, name="train-theirs")
    assert list(jobs_search(user, JobFilter(q="train"))) == [mine]
    assert list(jobs_search(user, JobFilter(q="RESNET"))) == [mine]
    assert not jobs_search(user, JobFilter(q="theirs")).exists()


def test_bad_filter_values_are_dropped_not_errors():
    flt = job_filter_parse({"q": "  x" * 80, "state": "bogus", "outcome": "'; drop"})
    assert flt.state == "" and flt.outcome == "" and len(flt.q) == 100 and not flt.q.startswith(" ")
    assert job_filter_parse({}).active is False
    assert job_filter_parse({"outcome": "failed"}).params() == {"outcome": "failed"}


def test_the_page_searches_and_filters_by_get_parameters(web, user, stranger_user, node):
    finished_job(user, name="sweep-failed", exit_code=3)
    pool_drain()  # the rest wait in the queue
    queued_job(user, name="sweep-lr-1")
    queued_job(user, name="sweep-lr-2")
    queued_job(user, name="other-thing")
    queued_job(stranger_user, name="sweep-stranger")
    html = web.get("/?q=SWEEP").content.decode()
    for name in ("sweep-lr-1", "sweep-lr-2", "sweep-failed"):
        assert name in html
    assert "other-thing" not in html and "sweep-stranger" not in html
    assert 'name="q" id="job-search" value="SWEEP"' in html and "3 jobs" in html
    html = web.get("/?q=sweep&outcome=failed").content.decode()
    assert "sweep-failed" in html and "sweep-lr-1" not in html
    assert '<option value="failed" selected>' in html
    html = web.get("/?state=queued&q=lr-2").content.decode()
    assert "sweep-lr-2" in html and "sweep-lr-1" not in html and "sweep-failed" not in html
    html = web.get("/?q=nothing-like-it").content.decode()
    assert "No jobs match “nothing-like-it”" in html


def test_a_search_keeps_its_parameters_in_the_page_links(frozen_clock, web, user, node):
    pool_drain()
    for i in range(51):
        queued_job(user, name=f"many-{i:02d}")
        frozen_clock.advance(minutes=1)
    queued_job(user, name="not-this-one")
    html = web.get("/?q=many&state=queued").content.decode()
    assert "not-this-one" not in html
    assert 'href="?q=many&amp;state=queued&amp;page=2"' in html
    second = web.get("/?q=many&state=queued&page=2").content.decode()
    assert "many-00" in second and "not-this-one" not in second


def test_live_rows_join_only_a_page_that_is_not_searched(web, user, node):
    queued_job(user, name="any")
    assert 'data-new-rows="any"' in web.get("/").content.decode()
    assert 'data-new-rows="queued"' in web.get("/?state=queued").content.decode()
    assert 'data-new-rows=""' in web.get("/?q=any").content.decode()  # a new row may not match
    assert 'data-new-rows=""' in web.get("/?outcome=failed").content.decode()


# --- columns -------------------------------------------------------------------
def test_ran_is_a_dash_before_the_run_then_time_so_far_then_the_run_time(frozen_clock, user, node):
    job = rented_job(user)
    assert run_duration(job, frozen_clock.now()) == "–"
    agent = Agent(job, clock=frozen_clock)
    job = agent.start()
    frozen_clock.advance(seconds=95)
    job.refresh_from_db()
    assert list_row_context(job)["job"].duration == "1m35s"
    frozen_clock.advance(seconds=5)
    job = agent.end(0)
    frozen_clock.advance(hours=3)  # long after: the run time, not the time since
    job.refresh_from_db()
    assert job.state == "released" and run_duration(job, frozen_clock.now()) == "1m40s"


def test_the_row_shows_gpus_per_node_times_nodes_and_ran(frozen_clock, web, user, node):
    node_with_gpus(count=4, model="H100-80GB", memory_mb=81559)  # two nodes: a two-node job fits
    waiting = queued_job(user, name="two-nodes", compute={"gpus": 2, "nodes": 2, "time_limit": "10m"})
    done, _ = finished_job(user, name="done", clock=frozen_clock, run_s=125)
    html = web.get("/").content.decode()
    assert '<th scope="col" class="num">Ran</th>' in html
    row = row_of(html, waiting)
    assert re.search(r'class="num cell-gpus" data-label="GPUs">4 <span class="muted">\(2×2\)</span>', row)
    assert 'class="num cell-duration" data-label="Ran">–</td>' in row
    assert 'data-label="Ran">2m5s</td>' in row_of(html, done)
    assert 'data-label="Ran">2m5s</td>' in render_row(done)


# --- bulk cancel ---------------------------------------------------------------
def test_only_cancellable_rows_have_a_checkbox_of_the_bulk_form(web, user, node):
    waiting = queued_job(user, name="waiting")
    done, _ = finished_job(user, name="done")
    html = web.get("/").content.decode()
    assert f'name="ids" value="{waiting.pk}" form="bulk-cancel"' in row_of(html, waiting)
    assert 'name="ids"' not in row_of(html, done)
    form = re.search(r'<form method="post" action="/jobs/cancel/" id="bulk-cancel".*?</form>', html, re.S).group(0)
    assert "csrfmiddlewaretoken" in form and "hx-confirm=" in form and "Cancel selected" in form
    assert 'name="ids" value="' in render_row(waiting)  # a pushed row can be ticked too


def test_bulk_cancel_without_js_asks_to_confirm_then_cancels(web, user, node):
    pool_drain()
    a, b = queued_job(user, name="first"), queued_job(user, name="second")
    resp = web.post("/jobs/cancel/", {"ids": [a.pk, b.pk], "back": "q=fir"})
    assert resp.status_code == 200
    page = resp.content.decode()
    assert "Cancel 2 jobs?" in page and "first" in page and "second" in page
    assert 'name="confirm" value="1"' in page and 'name="back" value="q=fir"' in page
    assert Job.objects.filter(pk__in=[a.pk, b.pk], state="queued").count() == 2  # nothing cancelled yet
    resp = web.post("/jobs/cancel/", {"ids": [a.pk, b.pk], "confirm": "1", "back": "q=fir"})
    assert resp.status_code == 302 and resp["Location"] == "/?q=fir"
    assert Job.objects.filter(pk__in=[a.pk, b.pk], state="released", outcome="cancelled").count() == 2
    assert "2 jobs cancelled." in web.get("/").content.decode()


def test_bulk_cancel_counts_running_and_already_ending_jobs(web, user, node):
    done, _ = finished_job(user)
    running = Agent(rented_job(user)).start()
    pool_drain()
    waiting = queued_job(user)
    resp = web.post("/jobs/cancel/", {"ids": [waiting.pk, running.pk, done.pk], "confirm": "1"},
                    headers={"HX-Request": "true"})
    assert resp.status_code == 204 and resp["HX-Redirect"] == "/"
    running.refresh_from_db()
    assert running.cancel_requested_at is not None and running.state == "running"
    html = web.get("/").content.decode()
    assert "2 jobs cancelled; 1 of them running: the node stops the run and packs its outputs; " \
           "1 already ending or ended." in html


def test_a_strangers_id_is_ignored_and_reveals_nothing(web, stranger_web, user, stranger_user, node):
    pool_drain()
    theirs = queued_job(stranger_user, name="their-secret-job")
    mine = queued_job(user, name="mine")
    page = web.post("/jobs/cancel/", {"ids": [theirs.pk, mine.pk]}).content.decode()
    assert "their-secret-job" not in page and "Cancel 1 job?" in page
    resp = web.post("/jobs/cancel/", {"ids": [theirs.pk, mine.pk], "confirm": "1"})
    theirs.refresh_from_db()
    assert theirs.state == "queued" and theirs.cancel_requested_at is None
    assert "1 job cancelled." in web.get(resp["Location"]).content.decode()
    # Only a stranger's id: the same answer as an id of no job at all.
    alone = web.post("/jobs/cancel/", {"ids": [theirs.pk]}, follow=True).content.decode()
    nobody = web.post("/jobs/cancel/", {"ids": [987654]}, follow=True).content.decode()
    assert "None of the selected jobs can be cancelled" in alone and "their-secret-job" not in alone
    def same(html: str) -> str:  # without the CSRF token and the ids
        return re.sub(r"[A-Za-z0-9]{32,}|\d+", "", html)
    assert same(alone) == same(nobody)
    assert jobs_cancel_bulk(owner=user, ids=[theirs.pk]).cancelled == 0
    theirs.refresh_from_db()
    assert theirs.state == "queued"


def test_bulk_cancel_refuses_bad_ids_by_name_and_needs_a_post(web, user, node):
    html = web.post("/jobs/cancel/", {"ids": ["1; drop"], "confirm": "1"}, follow=True).content.decode()
    assert "ids: &#x27;1; drop&#x27; is not a job id" in html
    assert "No job selected" in web.post("/jobs/cancel/", {}, follow=True).content.decode()
    assert web.get("/jobs/cancel/").status_code == 405
    with pytest.raises(BulkCancelError, match="at most"):
        bulk_ids_parse(range(1, BULK_CANCEL_MAX + 2))
    assert bulk_ids_parse(["3", 3, "4"]) == [3, 4]


def test_the_back_parameter_is_only_a_filter(web, user, node):
    job = queued_job(user)
    resp = web.post("/jobs/cancel/", {"ids": [job.pk], "confirm": "1", "back": "next=//evil.example&state=queued"})
    assert resp["Location"] == "/?state=queued"


def test_a_signed_out_bulk_cancel_goes_to_sign_in(client, user, node):
    pool_drain()
    job = queued_job(user)
    resp = client.post("/jobs/cancel/", {"ids": [job.pk], "confirm": "1"})
    assert resp.status_code == 302 and "/accounts/login/" in resp["Location"]
    job.refresh_from_db()
    assert job.state == "queued"


# --- the API -------------------------------------------------------------------
def test_the_api_cancels_my_jobs_and_ignores_a_strangers(api, owner, stranger, node):
    running = Agent(rented_job(owner)).start()
    pool_drain()
    mine, theirs = queued_job(owner), queued_job(stranger)
    resp = api.post("/api/v1/jobs/cancel/", {"ids": [mine.pk, running.pk, theirs.pk, 999999]}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json() == {"cancelled": 2, "released": 1, "stopping": 1, "already": 0}
    theirs.refresh_from_db()
    assert theirs.state == "queued"
    again = api.post("/api/v1/jobs/cancel/", {"ids": [mine.pk]}, format="json").json()
    assert again == {"cancelled": 0, "released": 0, "stopping": 0, "already": 1}


@pytest.mark.parametrize("body", [{}, {"ids": "1,2"}, {"ids": [1, "x"]}, {"ids": [True]}, {"ids": [1.5]}])
def test_the_api_names_the_field_of_bad_ids(api, body):
    resp = api.post("/api/v1/jobs/cancel/", body, format="json")
    assert resp.status_code == 400 and "ids" in resp.json()
