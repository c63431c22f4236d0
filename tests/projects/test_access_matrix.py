"""Issue 25's stranger matrix: every page, API endpoint and WebSocket about a project's job, for each
role, a member of another project and anonymous. Members see everything (404 for nobody of them);
a stranger gets 404 everywhere, anonymous a sign-in (pages) or 401 (API); only the owner of a job,
the project's admins and owners may cancel it, a viewer's cancel is a 403 that says why."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from apps.core.choices import JobState
from apps.jobs.models import Job, JobEvent

from ..drive import finished_job, queued_job
from ..web.test_live_consumers import cookie_of, refused
from .conftest import client_of

ROLES = ["owner", "admin", "member", "viewer", "stranger", None]
SEES = {"owner", "admin", "member", "viewer"}


def _reads(job: Job) -> list[tuple[str, str]]:
    """(kind, URL) of every read about one job: pages and API endpoints."""
    pk = job.pk
    return [("page", f"/jobs/{pk}/"), ("page", f"/jobs/{pk}/log/"), ("page", f"/jobs/{pk}/log/lines/"),
            ("page", f"/jobs/{pk}/files/out.txt"), ("page", f"/jobs/{pk}/download/out.txt"),
            ("page", f"/jobs/{pk}/bundle/"), ("page", f"/usage/receipts/{pk}/"),
            ("api", f"/api/v1/jobs/{pk}/"), ("api", f"/api/v1/jobs/{pk}/events/"),
            ("api", f"/api/v1/jobs/{pk}/logs/"), ("api", f"/api/v1/jobs/{pk}/metrics/"),
            ("api", f"/api/v1/jobs/{pk}/bundle/"), ("api", f"/api/v1/jobs/{pk}/files/"),
            ("api", f"/api/v1/jobs/{pk}/files/out.txt")]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reads_the_projects_job_exactly_as_allowed(team, pool, role):
    job, _ = finished_job(team.member, files={"out.txt": b"result\n"}, packer=True, project="ml",
                          output={"paths": ["out.txt"]})
    user = team.by_role().get(role)
    client = client_of(user)
    for kind, url in _reads(job):
        status = client.get(url).status_code
        if role in SEES:
            assert status in (200, 302), (role, url, status)  # 302: a bundle or file from its storage
        elif role is None:
            assert status == (401 if kind == "api" else 302), (role, url, status)
        else:
            assert status == 404, (role, url, status)
    listed = client.get("/api/v1/jobs/?project=ml")
    if role in SEES:
        assert [j["id"] for j in listed.json()["results"]] == [job.pk]
        assert listed.json()["results"][0]["owner"] == "mia"
        assert listed.json()["results"][0]["project"] == "ml"
        assert f"/jobs/{job.pk}/" in client.get("/").content.decode()
        assert f"/jobs/{job.pk}/" in client.get("/?project=ml").content.decode()
    elif role == "stranger":
        assert listed.json()["results"] == []
        assert f"/jobs/{job.pk}/" not in client.get("/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_each_role_may_open_the_jobs_websocket_exactly_as_allowed(team, pool):
    job = queued_job(team.member, project="ml")
    for role in ROLES:
        user = team.by_role().get(role)
        cookie = cookie_of(user) if user is not None else None
        assert async_to_sync(refused)(f"/ws/jobs/{job.pk}/", cookie) == (role not in SEES), role


@pytest.mark.parametrize(("role", "expected"), [("owner", 200), ("admin", 200), ("member", 403), ("viewer", 403),
                                                ("stranger", 404), (None, 401)])
def test_only_the_jobs_owner_admins_and_owners_cancel_it(team, pool, role, expected):
    job = queued_job(team.owner, project="ml")
    response = client_of(team.by_role().get(role)).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == expected, response.content
    job.refresh_from_db()
    assert (job.state == JobState.RELEASED) == (expected == 200)
    if expected == 403:
        assert "only the job's owner, admins and owners can cancel" in response.json()["detail"]
        assert f"is {role}" in response.json()["detail"]
    if role == "admin":
        assert JobEvent.objects.filter(job=job, detail="cancelled while queued by adam").exists()


def test_a_viewers_cancel_from_the_page_is_a_403_that_says_why(team, pool):
    job = queued_job(team.member, project="ml")
    response = client_of(team.viewer).post(f"/jobs/{job.pk}/cancel/", {"confirm": "1"})
    assert response.status_code == 403
    assert "Your role in project ml is viewer" in response.content.decode()  # the page says why
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    # The job page offers a viewer neither Cancel (hidden around the shared live fragment) nor Run again.
    page = client_of(team.viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert "data-may-not-cancel" in page and "Run again" not in page and "Edit and run" not in page
    owners = client_of(team.member).get(f"/jobs/{job.pk}/").content.decode()
    assert "data-may-not-cancel" not in owners and "Run again" in owners


def test_a_member_cancels_their_own_job_and_a_bulk_cancel_skips_the_others(team, pool):
    mine = queued_job(team.member, project="ml")
    theirs = queued_job(team.owner, project="ml")
    response = client_of(team.member).post("/api/v1/jobs/cancel/", {"ids": [mine.pk, theirs.pk]},
                                           content_type="application/json")
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=mine.pk).state == JobState.RELEASED
    assert Job.objects.get(pk=theirs.pk).state == JobState.QUEUED


def test_a_projects_array_is_shared_and_only_admins_and_owners_cancel_a_teammates(team, pool):
    from apps.jobs.arrays import array_submit

    from ..factories import spec

    submitted = array_submit(owner=team.member, document=spec(project="ml", array=3))
    url = f"/api/v1/arrays/{submitted.array.pk}/"
    for role in ROLES:
        client = client_of(team.by_role().get(role))
        for page, anonymous in ((url, 401), (f"/arrays/{submitted.array.pk}/", 302),
                                (f"/api/v1/jobs/?array={submitted.array.pk}", 401)):
            expected = 200 if role in SEES else anonymous if role is None else 404
            assert client.get(page).status_code == expected, (role, page)
    assert client_of(team.viewer).post(url + "cancel/").status_code == 403
    assert client_of(team.admin).post(url + "cancel/").status_code == 200
    details = set(JobEvent.objects.filter(job_id__in=submitted.job_ids).values_list("detail", flat=True))
    assert "cancelled with its array while queued by adam" in details or "cancel requested by adam" in details
