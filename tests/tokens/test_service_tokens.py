"""Service tokens (issue 25 item 5): an owner makes one for CI, it acts for the project with its role
(its submits go to the project, it sees the project's jobs and nothing else), it is stored hashed,
stamps ``last_used_at`` and stops working when revoked."""
from __future__ import annotations

from django.test import Client

from apps.tokens.models import ApiToken
from apps.tokens.services import token_hash

from ..factories import spec
from ..projects.conftest import client_of, team  # noqa: F401  (the fixture)


def _token_client(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_an_owners_service_token_submits_to_the_project_and_sees_only_its_jobs(team, pool):  # noqa: F811
    owner = client_of(team.owner)
    made = owner.post("/api/v1/projects/ml/tokens/", {"name": "ci", "role": "member"},
                      content_type="application/json")
    assert made.status_code == 201, made.content
    key = made.json()["key"]
    assert made["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(key_hash=token_hash(key))
    assert token.project == team.project and key not in str(token.__dict__)

    ci = _token_client(key)
    submitted = ci.post("/api/v1/jobs/", spec(name="nightly"), content_type="application/json")
    assert submitted.status_code == 201, submitted.content
    assert submitted.json()["project"] == "ml"
    theirs = client_of(team.stranger).post("/api/v1/jobs/", spec(project="other"), content_type="application/json")
    listed = [j["id"] for j in ci.get("/api/v1/jobs/").json()["results"]]
    assert submitted.json()["id"] in listed and theirs.json()["id"] not in listed
    assert client_of(team.viewer).get(f"/api/v1/jobs/{submitted.json()['id']}/").status_code == 200
    assert [p["name"] for p in ci.get("/api/v1/projects/").json()["results"]] == ["ml"]  # no personal one

    rows = owner.get("/api/v1/projects/ml/tokens/").json()["results"]
    assert [(r["name"], r["role"]) for r in rows] == [("ci", "member")]
    assert rows[0]["last_used_at"] is not None and "key" not in rows[0]
    assert owner.delete(f"/api/v1/projects/ml/tokens/{rows[0]['prefix']}/").status_code == 204
    assert ci.get("/api/v1/jobs/").status_code == 401


def test_only_owners_make_or_revoke_service_tokens_and_never_an_owner_token(team):  # noqa: F811
    url = "/api/v1/projects/ml/tokens/"
    for user, status in ((team.admin, 403), (team.member, 403), (team.viewer, 403), (team.stranger, 404)):
        assert client_of(user).post(url, {"name": "ci", "role": "member"},
                                    content_type="application/json").status_code == status
    bad = client_of(team.owner).post(url, {"name": "ci", "role": "owner"}, content_type="application/json")
    assert bad.status_code == 400 and "role" in bad.json()
    personal = client_of(team.owner).post("/api/v1/projects/~olga/tokens/", {"name": "ci", "role": "member"},
                                          content_type="application/json")
    assert personal.status_code == 400 and "project" in personal.json()


def test_a_viewer_token_reads_but_cannot_submit(team, pool):  # noqa: F811
    key = client_of(team.owner).post("/api/v1/projects/ml/tokens/", {"name": "dash", "role": "viewer"},
                                     content_type="application/json").json()["key"]
    response = _token_client(key).post("/api/v1/jobs/", spec(), content_type="application/json")
    assert response.status_code == 400
    assert "Your role in project ml is viewer" in response.json()["project"][0]
