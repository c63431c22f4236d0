"""``/api/v1/secrets/``: set, replace, list, delete; bad input names the field; a stranger sees none."""
import pytest

pytestmark = pytest.mark.django_db

VALUE = "hf_SuperSecretValue123"


def test_it_creates_and_answers_without_the_value(api):
    resp = api.post("/api/v1/secrets/", {"name": "HF_TOKEN", "value": VALUE}, format="json")
    assert resp.status_code == 201
    body = resp.json()
    assert set(body) == {"name", "created_at", "updated_at"} and body["name"] == "HF_TOKEN"
    assert VALUE not in resp.content.decode()


def test_it_replaces_a_value_and_keeps_one_row(api, frozen_clock):
    first = api.post("/api/v1/secrets/", {"name": "HF_TOKEN", "value": VALUE}, format="json").json()
    frozen_clock.advance(60)
    again = api.post("/api/v1/secrets/", {"name": "HF_TOKEN", "value": VALUE + "2"}, format="json")
    assert again.status_code == 200
    assert again.json()["created_at"] == first["created_at"] and again.json()["updated_at"] > first["updated_at"]
    listed = api.get("/api/v1/secrets/")
    assert [s["name"] for s in listed.json()["results"]] == ["HF_TOKEN"]
    assert VALUE not in listed.content.decode()


def test_it_lists_names_only_and_deletes(api):
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        api.post("/api/v1/secrets/", {"name": name, "value": VALUE + name}, format="json")
    listed = api.get("/api/v1/secrets/").json()["results"]
    assert [s["name"] for s in listed] == ["HF_TOKEN", "WANDB_API_KEY"]
    assert all(set(s) == {"name", "created_at", "updated_at"} for s in listed)
    assert api.delete("/api/v1/secrets/HF_TOKEN/").status_code == 204
    assert api.delete("/api/v1/secrets/HF_TOKEN/").status_code == 404
    assert [s["name"] for s in api.get("/api/v1/secrets/").json()["results"]] == ["WANDB_API_KEY"]


@pytest.mark.parametrize("body,field", [
    ({"name": "hf_token", "value": "x" * 10}, "name"),
    ({"name": "1TOKEN", "value": "x" * 10}, "name"),
    ({"name": "A" * 101, "value": "x" * 10}, "name"),
    ({"value": "x" * 10}, "name"),
    ({"name": "HF_TOKEN"}, "value"),
    ({"name": "HF_TOKEN", "value": ""}, "value"),
    ({"name": "HF_TOKEN", "value": 12345}, "value"),
    ({"name": "HF_TOKEN", "value": "x" * (64 * 1024 + 1)}, "value"),
    ({"name": "HF_TOKEN", "value": "a\x00b"}, "value"),
])
def test_bad_input_is_a_400_naming_the_field(api, body, field):
    resp = api.post("/api/v1/secrets/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()


def test_a_value_of_64_kib_is_accepted(api):
    assert api.post("/api/v1/secrets/", {"name": "BIG", "value": "x" * 64 * 1024}, format="json").status_code == 201


def test_a_stranger_neither_sees_nor_deletes_anothers_secret(api, stranger_api):
    api.post("/api/v1/secrets/", {"name": "HF_TOKEN", "value": VALUE}, format="json")
    assert stranger_api.get("/api/v1/secrets/").json()["results"] == []
    assert stranger_api.delete("/api/v1/secrets/HF_TOKEN/").status_code == 404
    assert [s["name"] for s in api.get("/api/v1/secrets/").json()["results"]] == ["HF_TOKEN"]


@pytest.mark.parametrize("name", ["%00", "a%20b", "x" * 300])
def test_deleting_a_malformed_name_is_a_404_not_a_500(api, name):
    assert api.delete(f"/api/v1/secrets/{name}/").status_code == 404


def test_anonymous_callers_are_refused(client):
    assert client.get("/api/v1/secrets/").status_code in (401, 403)
