"""``/api/v1/account/tokens/`` (issue 28): create (the key this once), list (never a key), revoke at once;
bad input is a 400 naming the field; a stranger's token id is a 404."""
import json

import pytest
from rest_framework.test import APIClient

from apps.tokens.models import ApiToken
from apps.tokens.services import token_create

pytestmark = pytest.mark.django_db

URL = "/api/v1/account/tokens/"


def _with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_it_creates_a_token_and_shows_its_key_once(api, owner):
    resp = api.post(URL, {"name": "laptop"}, format="json")
    assert resp.status_code == 201 and resp["Cache-Control"] == "no-store"
    body = resp.json()
    assert set(body) == {"id", "name", "prefix", "created_at", "key"}
    assert body["name"] == "laptop" and body["prefix"] == body["key"][:8] and len(body["key"]) == 40
    token = ApiToken.objects.get(pk=body["id"])
    assert token.user == owner and body["key"] not in (token.key_hash, token.prefix)
    assert _with_key(body["key"]).get("/api/v1/jobs/").status_code == 200
    listed = api.get(URL)
    assert body["key"] not in listed.content.decode()


def test_it_lists_my_tokens_newest_first_with_last_use(api, owner, frozen_clock):
    _, old_key = token_create(user=owner, name="old")
    frozen_clock.advance(60)
    token_create(user=owner, name="new")
    _with_key(old_key).get("/api/v1/jobs/")
    results = api.get(URL).json()["results"]
    assert [t["name"] for t in results] == ["new", "old"]
    assert all(set(t) == {"id", "name", "prefix", "created_at", "last_used_at"} for t in results)
    assert results[0]["last_used_at"] is None and results[1]["last_used_at"] is not None


def test_a_name_is_optional_and_trimmed(api):
    assert api.post(URL, {}, format="json").json()["name"] == ""
    assert api.post(URL, {"name": "  ci  "}, format="json").json()["name"] == "ci"


def test_revoking_stops_the_key_at_once(api, owner):
    token, key = token_create(user=owner, name="ci")
    assert _with_key(key).get("/api/v1/jobs/").status_code == 200
    assert api.delete(f"{URL}{token.pk}/").status_code == 204
    assert _with_key(key).get("/api/v1/jobs/").status_code == 401
    assert api.delete(f"{URL}{token.pk}/").status_code == 404
    assert api.get(URL).json()["results"] == []


def test_a_token_can_revoke_itself(owner):
    token, key = token_create(user=owner, name="self")
    assert _with_key(key).delete(f"{URL}{token.pk}/").status_code == 204
    assert _with_key(key).get(URL).status_code == 401


def test_a_stranger_neither_sees_nor_revokes_anothers_token(api, owner, stranger_api):
    token, key = token_create(user=owner, name="alices-laptop")
    assert stranger_api.get(URL).json()["results"] == []
    assert stranger_api.delete(f"{URL}{token.pk}/").status_code == 404
    assert _with_key(key).get("/api/v1/jobs/").status_code == 200
    assert [t["name"] for t in api.get(URL).json()["results"]] == ["alices-laptop"]


@pytest.mark.parametrize("body", [
    {"name": "x" * 101},
    {"name": 123},
    {"name": None},
    {"name": ["laptop"]},
    {"name": "a\x00b"},
    {"name": "tab\there"},
    '{"name": "\\ud800"}',
])
def test_bad_input_is_a_400_naming_the_field(api, body):
    if isinstance(body, str):  # JSON the test client cannot encode from a dict (a lone surrogate)
        resp = api.post(URL, body, content_type="application/json")
    else:
        resp = api.post(URL, body, format="json")
    assert resp.status_code == 400 and "name" in resp.json(), resp.json()
    assert not ApiToken.objects.exists()


def test_a_name_of_100_characters_is_accepted(api):
    assert api.post(URL, {"name": "x" * 100}, format="json").status_code == 201


@pytest.mark.parametrize("path", ["0/", "abc/", "9" * 30 + "/"])
def test_a_malformed_id_is_a_404_not_a_500(api, path):
    assert api.delete(f"{URL}{path}").status_code == 404


def test_anonymous_callers_are_refused(client):
    assert client.get(URL).status_code == 401
    assert client.post(URL, {"name": "x"}).status_code == 401


def test_the_schema_documents_the_calls(api):
    schema = json.loads(api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    ops = schema["paths"]
    assert {"get", "post"} <= set(ops["/api/v1/account/tokens/"])
    assert "delete" in ops["/api/v1/account/tokens/{id}/"]
