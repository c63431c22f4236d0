"""The Projects pages: each member sees the members, only owners and admins get the forms that
change them, a stranger gets 404, anonymous the sign-in page."""
from __future__ import annotations

from apps.projects.models import Membership

from .conftest import client_of


def test_the_project_page_for_each_role(team):
    for role, user in team.by_role().items():
        page = client_of(user).get("/projects/ml/")
        if role == "stranger":
            assert page.status_code == 404
            continue
        html = page.content.decode()
        assert page.status_code == 200 and "olga" in html and "vic" in html
        assert ("Add a member" in html) == (role in ("owner", "admin")), role
    assert client_of(None).get("/projects/ml/").status_code == 302
    assert "~sam" in client_of(team.stranger).get("/projects/").content.decode()


def test_an_admin_adds_and_changes_a_member_and_a_viewer_cannot(team):
    admin = client_of(team.admin)
    assert admin.post("/projects/ml/", {"username": "sam", "role": "viewer"}).status_code == 302
    assert Membership.objects.get(project=team.project, user=team.stranger).role == "viewer"
    admin.post("/projects/ml/members/sam/", {"role": "member"})
    assert Membership.objects.get(project=team.project, user=team.stranger).role == "member"
    again = admin.post("/projects/ml/", {"username": "sam", "role": "viewer"})
    assert "sam is a member already." in again.content.decode()
    client_of(team.viewer).post("/projects/ml/members/sam/", {"remove": "1"})
    assert Membership.objects.filter(project=team.project, user=team.stranger).exists()


def test_a_user_makes_a_project_from_the_page(team):
    response = client_of(team.stranger).post("/projects/", {"name": "vision"})
    assert response.status_code == 302 and response["Location"] == "/projects/vision/"
    taken = client_of(team.stranger).post("/projects/", {"name": "ml"})
    assert "exists already" in taken.content.decode()


def test_the_monthly_statement_lists_every_members_leases_for_members_only(team, pool):
    from ..drive import finished_job

    finished_job(team.member, project="ml")
    finished_job(team.admin, project="ml")
    page = client_of(team.viewer).get("/projects/ml/statement/")
    html = page.content.decode()
    assert page.status_code == 200 and "By member" in html and "mia" in html and "adam" in html
    assert client_of(team.stranger).get("/projects/ml/statement/").status_code == 404
    assert client_of(team.viewer).get("/projects/ml/statement/?month=2026-13").status_code == 400
    assert "No charged use" in client_of(team.viewer).get("/projects/ml/statement/?month=2020-01").content.decode()


def test_my_jobs_shows_a_teammates_job_with_its_project_and_owner(team, pool):
    from ..drive import queued_job

    job = queued_job(team.member, project="ml")
    html = client_of(team.viewer).get("/").content.decode()
    assert f"/jobs/{job.pk}/" in html and "ml · mia" in html
