"""``/api/v1/projects/``: make a project, add, change and remove members, each refusal naming its
field (issue 25 item 1), and a job's ``project`` at submit."""
from __future__ import annotations

import pytest

from apps.jobs.services.submit import job_submit
from apps.jobs.spec import SpecError
from apps.projects.models import Membership

from ..factories import spec
from .conftest import client_of


def test_a_user_lists_their_personal_project_first_and_makes_one(team):
    client = client_of(team.stranger)
    assert client.post("/api/v1/projects/", {"name": "vision"}, content_type="application/json").status_code == 201
    names = [p["name"] for p in client.get("/api/v1/projects/").json()["results"]]
    assert names == ["~sam", "other", "vision"]
    assert client.get("/api/v1/projects/").json()["results"][0]["personal"] is True


@pytest.mark.parametrize(("name", "words"), [("ml", "exists already"), ("Bad Name", "lowercase"), ("", "lowercase"),
                                             ("~sam", "lowercase"), (7, "lowercase")])
def test_a_bad_or_taken_name_is_a_400_naming_name(team, name, words):
    response = client_of(team.stranger).post("/api/v1/projects/", {"name": name}, content_type="application/json")
    assert response.status_code == 400
    assert words in response.json()["name"][0]


def test_admins_add_members_owners_make_owners_and_the_last_owner_stays(team):
    admin = client_of(team.admin)
    url = "/api/v1/projects/ml/members/"
    assert admin.post(url, {"username": "sam", "role": "viewer"}, content_type="application/json").status_code == 201
    assert admin.post(url, {"username": "sam", "role": "viewer"},
                      content_type="application/json").json()["username"] == ["sam is a member already."]
    assert admin.patch(url + "sam/", {"role": "owner"}, content_type="application/json").status_code == 403
    assert admin.post(url, {"username": "nobody", "role": "member"}, content_type="application/json").json() == {
        "username": ["No user 'nobody'."]}
    assert admin.post(url, {"username": "x", "role": "boss"}, content_type="application/json").status_code == 400
    assert client_of(team.member).post(url, {"username": "sam", "role": "viewer"},
                                       content_type="application/json").status_code == 403
    owner = client_of(team.owner)
    assert owner.patch(url + "olga/", {"role": "member"}, content_type="application/json").json() == {
        "role": ["A project keeps at least one owner: make another owner first."]}
    assert [m["username"] for m in owner.get(url).json()["results"]][:2] == ["olga", "adam"]
    assert client_of(team.viewer).delete(url + "vic/").status_code == 204  # one leaves by themself
    assert not Membership.objects.filter(user=team.viewer).filter(project=team.project).exists()


def test_a_stranger_gets_404_for_the_project_and_its_members(team):
    client = client_of(team.stranger)
    for url in ("/api/v1/projects/ml/", "/api/v1/projects/ml/members/", "/api/v1/projects/ml/tokens/"):
        assert client.get(url).status_code == 404, url
    assert client.post("/api/v1/projects/ml/members/", {"username": "sam", "role": "owner"},
                       content_type="application/json").status_code == 404


def test_a_submit_to_a_project_one_may_not_submit_to_is_a_400_naming_project(team, pool):
    for user, words in ((team.viewer, "Your role in project ml is viewer"),
                        (team.stranger, "You are in no project named 'ml'")):
        with pytest.raises(SpecError) as e:
            job_submit(owner=user, document=spec(project="ml"))
        assert words in e.value.errors["project"][0]
    job = job_submit(owner=team.member, document=spec(project="ml"))
    assert job.project == team.project and job.spec["project"] == "ml"
    personal = job_submit(owner=team.member, document=spec())
    assert personal.project.name == "~mia" and "project" not in personal.spec


def test_only_an_owner_sets_the_budget_and_only_below_the_operators_limit(team):
    team.project.spend_limit = "500.00"
    team.project.save()
    url = "/api/v1/projects/ml/"
    assert client_of(team.admin).patch(url, {"budget": "100"}, content_type="application/json").status_code == 403
    owner = client_of(team.owner)
    assert owner.patch(url, {"budget": "600"}, content_type="application/json").json()["budget"][0].startswith(
        "The operator's limit is $500.00")
    assert owner.patch(url, {"budget": "x"}, content_type="application/json").status_code == 400
    assert owner.patch(url, {"budget": "100", "alert_percent": 101},
                       content_type="application/json").json() == {
        "alert_percent": ["alert_percent must be a whole number from 1 to 100."]}
    done = owner.patch(url, {"budget": "100", "alert_percent": 90}, content_type="application/json").json()
    assert (done["budget"], done["alert_percent"], done["spend_limit"]) == ("100.00", 90, "500.00")


def test_an_owner_deletes_a_project_without_jobs_only(team, pool):
    assert client_of(team.admin).delete("/api/v1/projects/ml/").status_code == 403
    job_submit(owner=team.member, document=spec(project="ml"))
    kept = client_of(team.owner).delete("/api/v1/projects/ml/")
    assert kept.status_code == 400 and "has jobs" in kept.json()["project"][0]
    assert client_of(team.stranger).delete("/api/v1/projects/other/").status_code == 204
    assert client_of(team.stranger).get("/api/v1/projects/other/").status_code == 404
    assert client_of(team.stranger).delete("/api/v1/projects/~sam/").status_code == 400
