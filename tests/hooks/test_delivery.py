"""A delivery against a real HTTPS receiver: signed, retried with the same id, bounded in time, guarded."""
from __future__ import annotations

import io
import json
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest

from apps.hooks import guard
from apps.hooks.delivery import backoff_s, deliveries_due, delivery_try
from apps.hooks.models import Webhook, WebhookDelivery
from apps.hooks.services import webhook_create
from apps.hooks.signing import signature_valid
from apps.hooks.tasks import webhook_sweep_task

from .conftest import CONNECT_S, TOTAL_S

pytestmark = pytest.mark.django_db


def _hook(team, url: str, events=("released",)) -> tuple[Webhook, str]:
    return webhook_create(actor=team.owner, project=team.project, url=url, events=list(events))


def _delivery(hook: Webhook, now, key: str = "job:7:released") -> WebhookDelivery:
    d = WebhookDelivery(webhook=hook, event="released", dedupe_key=key, created_at=now, next_try_at=now)
    d.payload = {"id": str(d.delivery_id), "event": "released", "project": "ml-team",
                 "job": {"id": 7, "name": "tréma", "outcome": "succeeded"}}
    d.save()
    return d


def test_the_signature_verifies_with_the_secret_shown_at_creation(frozen_clock, team, receiver):
    hook, secret = _hook(team, receiver.url())
    d = _delivery(hook, frozen_clock.now())
    assert delivery_try(d.pk) == "delivered"
    (seen,) = receiver.seen
    h = seen.headers
    assert h["e31-webhook-id"] == str(d.delivery_id) and h["e31-webhook-event"] == "released"
    assert h["content-type"] == "application/json" and seen.path == "/hook"
    ts = h["e31-webhook-timestamp"]
    assert int(ts) == int(frozen_clock.now().timestamp())
    assert h["e31-webhook-signature"].startswith("v1=")
    assert signature_valid(secret, ts, seen.body, h["e31-webhook-signature"], now=int(ts))
    assert not signature_valid("whsec_other", ts, seen.body, h["e31-webhook-signature"], now=int(ts))
    assert not signature_valid(secret, ts, seen.body + b" ", h["e31-webhook-signature"], now=int(ts))
    assert not signature_valid(secret, ts, seen.body, h["e31-webhook-signature"], now=int(ts) + 301)  # a replay
    assert json.loads(seen.body)["job"]["name"] == "tréma"
    assert receiver.sni == [None]  # an address: no server name sent
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.delivered_at) == ("delivered", 1, 200, frozen_clock.now())


def test_a_500_then_200_gets_the_same_delivery_id_twice(frozen_clock, team, receiver):
    receiver.answers.append(500)
    hook, secret = _hook(team, receiver.url())
    d = _delivery(hook, frozen_clock.now())
    assert delivery_try(d.pk) == "pending"
    d.refresh_from_db()
    assert (d.attempts, d.last_status_code, d.last_error) == (1, 500, "answered 500")
    assert d.next_try_at == frozen_clock.now() + timedelta(seconds=30)
    assert delivery_try(d.pk) is None  # not due yet: nothing sent
    frozen_clock.advance(30)
    assert deliveries_due() == [d.pk]
    webhook_sweep_task()  # beat's sweep queues it (Celery eager here: it runs now)
    assert [s.headers["e31-webhook-id"] for s in receiver.seen] == [str(d.delivery_id)] * 2
    assert receiver.seen[0].body == receiver.seen[1].body
    assert receiver.seen[0].headers["e31-webhook-timestamp"] != receiver.seen[1].headers["e31-webhook-timestamp"]
    for seen in receiver.seen:
        h = seen.headers
        assert signature_valid(secret, h["e31-webhook-timestamp"], seen.body, h["e31-webhook-signature"],
                               now=int(h["e31-webhook-timestamp"]))
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code) == ("delivered", 2, 200)
    rows = team.api("viewer").get(f"/api/v1/projects/ml-team/webhooks/{hook.pk}/deliveries/").json()["results"]
    assert [(r["delivery_id"], r["last_status_code"], r["attempts"]) for r in rows] == [(str(d.delivery_id), 200, 2)]


def test_a_hanging_receiver_times_out_and_the_next_webhook_still_gets_its_delivery(frozen_clock, team, receivers):
    hanging, healthy = receivers(), receivers()
    hanging.hang = True
    slow = _delivery(_hook(team, hanging.url())[0], frozen_clock.now())
    quick = _delivery(_hook(team, healthy.url())[0], frozen_clock.now())
    started = time.monotonic()
    assert delivery_try(slow.pk) == "pending"
    took = time.monotonic() - started
    assert TOTAL_S * 0.9 <= took < CONNECT_S + TOTAL_S + 0.5, took
    slow.refresh_from_db()
    assert slow.last_status_code is None and "timed out" in slow.last_error
    started = time.monotonic()
    assert delivery_try(quick.pk) == "delivered"
    assert time.monotonic() - started < TOTAL_S
    assert len(healthy.seen) == 1 and len(hanging.seen) == 1


def test_a_silent_port_times_out_at_connect_or_is_refused_quickly(frozen_clock, team, hook_settings):
    hook_settings.E31_WEBHOOK_ALLOW_HOSTS = ["127.0.0.1:9"]  # discard: nothing listens
    d = _delivery(_hook(team, "https://127.0.0.1:9/")[0], frozen_clock.now())
    started = time.monotonic()
    assert delivery_try(d.pk) == "pending"
    assert time.monotonic() - started < CONNECT_S + 0.5
    d.refresh_from_db()
    assert d.last_status_code is None and d.last_error


def test_retries_back_off_doubling_to_an_hour_and_give_up_after_a_day(frozen_clock, team, receiver):
    assert [backoff_s(n) for n in (1, 2, 3, 7, 8, 30)] == [30, 60, 120, 1920, 3600, 3600]
    receiver.answers.extend([503] * 100)
    d = _delivery(_hook(team, receiver.url())[0], frozen_clock.now())
    statuses = []
    while (status := delivery_try(d.pk)) == "pending":
        statuses.append(status)
        d.refresh_from_db()
        frozen_clock.set(d.next_try_at)
    d.refresh_from_db()
    assert status == "failed" and d.status == "failed" and d.next_try_at is None
    assert d.attempts == len(receiver.seen) == len(statuses) + 1
    assert 20 < d.attempts < 35  # 30 s doubling for 7 tries, then hourly until a day has passed
    assert frozen_clock.now() - d.created_at <= timedelta(days=1)
    assert deliveries_due(now=frozen_clock.now() + timedelta(days=2)) == []


def test_a_redirect_is_not_followed(frozen_clock, team, receiver):
    receiver.answers.append(302)
    d = _delivery(_hook(team, receiver.url())[0], frozen_clock.now())
    assert delivery_try(d.pk) == "pending"
    d.refresh_from_db()
    assert d.last_status_code == 302 and len(receiver.seen) == 1


def test_a_host_name_connects_to_the_address_checked_with_its_name_for_tls(frozen_clock, team, receiver):
    _hook_, secret = _hook(team, receiver.url(host="localhost"))
    d = _delivery(_hook_, frozen_clock.now())
    assert delivery_try(d.pk) == "delivered"
    assert receiver.seen[0].headers["host"] == f"localhost:{receiver.port}"
    assert receiver.sni == ["localhost"]  # connected to 127.0.0.1, TLS checked against the name


def test_a_name_that_resolves_elsewhere_at_delivery_is_refused_then(frozen_clock, team, receiver, monkeypatch,
                                                                    hook_settings):
    """DNS rebinding: public at registration, loopback at the try."""
    answers = {"hooks.example.com": ["93.184.215.14"]}
    monkeypatch.setattr(guard, "_resolve", lambda host, port: answers[host])
    hook, _ = _hook(team, f"https://hooks.example.com:{receiver.port}/hook")
    answers["hooks.example.com"] = ["127.0.0.1"]
    d = _delivery(hook, frozen_clock.now())
    assert delivery_try(d.pk) == "pending"  # retried: the answer may change back
    d.refresh_from_db()
    assert "refused" in d.last_error and "loopback" in d.last_error
    assert receiver.seen == []


def test_an_untrusted_certificate_is_not_delivered(frozen_clock, team, receiver, hook_settings):
    d = _delivery(_hook(team, receiver.url())[0], frozen_clock.now())
    hook_settings.E31_WEBHOOK_CA_BUNDLE = ""  # the system's CAs: our self-signed receiver is not among them
    assert delivery_try(d.pk) == "pending"
    d.refresh_from_db()
    assert "CERTIFICATE_VERIFY_FAILED" in d.last_error or "certificate" in d.last_error.lower()


def test_a_try_is_claimed_once_and_a_deleted_webhook_sends_nothing(frozen_clock, team, receiver):
    hook, _ = _hook(team, receiver.url())
    d = _delivery(hook, frozen_clock.now())
    assert delivery_try(d.pk) == "delivered"
    assert delivery_try(d.pk) is None  # a task delivered twice
    other = _delivery(hook, frozen_clock.now(), key="job:8:released")
    hook.delete()
    assert delivery_try(other.pk) is None
    assert len(receiver.seen) == 1


def test_the_specs_verify_snippet_accepts_a_real_delivery(frozen_clock, team, receiver):
    spec = (Path(__file__).resolve().parents[2] / "docs" / "SPEC.md").read_text()
    snippet = re.search(r"### Webhooks.*?```python\n(.*?)```", spec, re.S).group(1)
    scope: dict = {}
    exec(snippet, scope)  # noqa: S102 (our own documentation)
    hook, secret = _hook(team, receiver.url())
    assert delivery_try(_delivery(hook, frozen_clock.now()).pk) == "delivered"
    (seen,) = receiver.seen
    headers = {k.title(): v for k, v in seen.headers.items()}  # "E31-Webhook-Timestamp"
    assert scope["e31_webhook_valid"](secret, headers, seen.body)
    assert not scope["e31_webhook_valid"](secret, headers, seen.body.replace(b"succeeded", b"failed"))


def test_a_key_rotation_keeps_every_webhook_signing(frozen_clock, team, receiver, hook_settings):
    from cryptography.fernet import Fernet
    from django.core.management import call_command

    from apps.secrets import crypto

    old, new = hook_settings.E31_SECRETS_KEY, Fernet.generate_key().decode()
    hook, secret = _hook(team, receiver.url())
    hook_settings.E31_SECRETS_KEY = f"{new},{old}"
    call_command("rotate_secrets_key", stdout=io.StringIO())
    hook_settings.E31_SECRETS_KEY = new  # the old key dropped
    hook.refresh_from_db()
    assert crypto.decrypt(hook.secret_token) == secret
    assert delivery_try(_delivery(hook, frozen_clock.now()).pk) == "delivered"
    h = receiver.seen[0].headers
    assert signature_valid(secret, h["e31-webhook-timestamp"], receiver.seen[0].body, h["e31-webhook-signature"],
                           now=int(h["e31-webhook-timestamp"]))
