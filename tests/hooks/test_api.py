"""``/api/v1/projects/{name}/webhooks/``: who may do what, what a bad request is told, never a 500."""
from __future__ import annotations

import pytest

from apps.hooks import guard
from apps.hooks.models import Webhook, WebhookDelivery
from apps.secrets import crypto

pytestmark = pytest.mark.django_db

BASE = "/api/v1/projects/ml-team/webhooks/"
PUBLIC = "https://hooks.example.com/e31"


@pytest.fixture(autouse=True)
def _public_dns(monkeypatch):
    """hooks.example.com resolves to a public address; no test asks a real resolver."""
    def resolve(host, port):
        if host == "hooks.example.com":
            return ["93.184.215.14"]
        if host == "inside.example.com":
            return ["93.184.215.14", "10.1.2.3"]
        raise guard.UrlRefused(f"the host {host} does not resolve")

    monkeypatch.setattr(guard, "_resolve", resolve)


def _create(team, who="owner", **body):
    return team.api(who).post(BASE, {"url": PUBLIC, "events": ["released"], **body}, format="json")


def test_it_registers_and_shows_the_secret_once(team):
    resp = _create(team, events=["queued", "released", "running", "array_finished"])
    assert resp.status_code == 201, resp.content
    out = resp.json()
    assert out["secret"].startswith("whsec_") and len(out["secret"]) == 70
    assert out["events"] == ["queued", "running", "released", "array_finished"]
    hook = Webhook.objects.get(pk=out["id"])
    assert out["secret"].encode() not in bytes(hook.secret_token)  # stored encrypted
    assert crypto.decrypt(hook.secret_token) == out["secret"]
    listed = team.api("viewer").get(BASE).json()["results"]
    assert [h["id"] for h in listed] == [out["id"]] and "secret" not in listed[0]
    assert listed[0]["created_by"] == "lead"


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_it_refuses_a_non_owner_with_the_reason(team, who):
    resp = _create(team, who)
    assert resp.status_code == 403
    assert resp.json()["detail"] == (f"Your role in project ml-team is {who}; only owners can change the budget, "
                                     "tokens and webhooks.")
    assert not Webhook.objects.exists()


def test_a_stranger_gets_404_everywhere(team):
    hook_id = _create(team).json()["id"]
    api = team.api("stranger")
    for resp in (api.get(BASE), api.post(BASE, {"url": PUBLIC, "events": ["queued"]}, format="json"),
                 api.delete(f"{BASE}{hook_id}/"), api.get(f"{BASE}{hook_id}/deliveries/")):
        assert resp.status_code == 404, resp.content
    assert team.api("anonymous").get(BASE).status_code in (401, 403)
    assert Webhook.objects.count() == 1


@pytest.mark.parametrize("events, words", [
    (None, "non-empty list"), ([], "non-empty list"), ("queued", "non-empty list"),
    (["queued", "exploded"], "unknown event 'exploded'"), ([1], "unknown event 1"),
])
def test_bad_events_are_a_400_naming_events(team, events, words):
    resp = _create(team, events=events)
    assert resp.status_code == 400
    assert words in resp.json()["events"][0]


@pytest.mark.parametrize("url, words", [
    (None, "https:// URL is required"), (42, "https:// URL is required"),
    ("http://hooks.example.com/", "only https://"), ("ftp://hooks.example.com/", "only https://"),
    ("https:///nohost", "names no host"), ("https://hooks.example.com:99999/", "not a valid URL"),
    ("https://user:pw@hooks.example.com/", "no user name or password"),
    ("https://hooks.example.com/a b", "no spaces"), ("https://" + "a" * 2001, "at most 2000"),
    ("https://127.0.0.1/hook", "loopback address"), ("https://localhost:8443/", "loopback address"),
    ("https://[::1]/", "loopback address"), ("https://[::ffff:127.0.0.1]/", "loopback address"),
    ("https://127.1/", "loopback address"), ("https://10.0.0.7/", "private address"),
    ("https://169.254.169.254/latest/meta-data/", "link-local (cloud metadata)"),
    ("https://100.64.1.1/", "shared (100.64.0.0/10)"),
    ("https://inside.example.com/", "inside.example.com (10.1.2.3) is a private address"),
    ("https://nowhere.example.com/", "does not resolve"),
])
def test_a_bad_or_refused_url_is_a_400_naming_url(team, url, words):
    resp = _create(team, url=url)
    assert resp.status_code == 400, resp.content
    assert words in resp.json()["url"][0]
    assert not Webhook.objects.exists()


def test_a_loopback_endpoint_is_allowed_only_when_the_operator_lists_it(team, hook_settings):
    assert _create(team, url="https://127.0.0.1:8443/hook").status_code == 400
    hook_settings.E31_WEBHOOK_ALLOW_HOSTS = ["127.0.0.1:8443"]
    assert _create(team, url="https://127.0.0.1:8443/hook").status_code == 201
    assert _create(team, url="https://127.0.0.1:8444/hook").status_code == 400  # the port counts


def test_a_malformed_body_is_a_400_not_a_500(team):
    api = team.api("owner")
    assert api.post(BASE, "{not json", content_type="application/json").status_code == 400
    resp = api.post(BASE, ["a", "list"], format="json")
    assert resp.status_code == 400 and "events" in resp.json()


def test_it_deletes_for_an_owner_only(team):
    hook_id = _create(team).json()["id"]
    resp = team.api("member").delete(f"{BASE}{hook_id}/")
    assert resp.status_code == 403 and "only owners" in resp.json()["detail"]
    assert team.api("owner").delete(f"{BASE}{hook_id}/").status_code == 204
    assert team.api("owner").delete(f"{BASE}{hook_id}/").status_code == 404
    assert team.api("owner").delete(f"{BASE}{10 ** 30}/").status_code == 404
    assert not Webhook.objects.exists()


def test_another_projects_webhook_is_not_found_here(team):
    from apps.projects.services import project_create

    other = project_create(owner=team.owner, name="other-team")
    hook_id = team.api("owner").post("/api/v1/projects/other-team/webhooks/", {"url": PUBLIC, "events": ["queued"]},
                                     format="json").json()["id"]
    assert team.api("owner").get(f"{BASE}{hook_id}/deliveries/").status_code == 404
    assert team.api("owner").delete(f"{BASE}{hook_id}/").status_code == 404
    assert Webhook.objects.filter(project=other).count() == 1


def test_the_delivery_log_shows_each_delivery_with_its_answer(team, frozen_clock):
    hook = Webhook.objects.get(pk=_create(team).json()["id"])
    WebhookDelivery.objects.create(webhook=hook, event="released", dedupe_key="job:1:released", payload={},
                                   created_at=frozen_clock.now(), next_try_at=frozen_clock.now())
    rows = team.api("viewer").get(f"{BASE}{hook.pk}/deliveries/").json()["results"]
    assert len(rows) == 1
    assert rows[0]["status"] == "pending" and rows[0]["last_status_code"] is None and rows[0]["attempts"] == 0
    assert team.api("owner").get(f"{BASE}{hook.pk + 1}/deliveries/").status_code == 404


def test_a_personal_project_has_webhooks_too(team):
    resp = team.api("owner").post("/api/v1/projects/~lead/webhooks/", {"url": PUBLIC, "events": ["queued"]},
                                  format="json")
    assert resp.status_code == 201
    assert team.api("member").get("/api/v1/projects/~lead/webhooks/").status_code == 404


def test_a_project_has_at_most_twenty(team):
    for _ in range(20):
        assert _create(team).status_code == 201
    resp = _create(team)
    assert resp.status_code == 400 and "at most 20" in resp.json()["url"][0]


def test_the_schema_lists_the_routes(team):
    schema = team.api("owner").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert "/api/v1/projects/{name}/webhooks/" in schema["paths"]
    assert "/api/v1/projects/{name}/webhooks/{webhook_id}/deliveries/" in schema["paths"]
