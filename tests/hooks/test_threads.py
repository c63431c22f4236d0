"""Standalone (eager Celery, one process): tries run on the webhook threads, so a hanging receiver holds
neither the commit that asked nor another webhook's delivery."""
from __future__ import annotations

import time

import pytest

from apps.hooks.models import WebhookDelivery
from apps.hooks.services import webhook_create
from apps.jobs.services.cancel import job_cancel

from ..drive import pool_drain, queued_job

pytestmark = pytest.mark.django_db(transaction=True)  # the threads read committed rows only


def _wait_for(check, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_hanging_receiver_holds_neither_the_release_nor_the_other_webhook(team, receivers, pool, hook_settings):
    hanging, healthy = receivers(), receivers()
    hanging.hang = True
    for r in (hanging, healthy):
        webhook_create(actor=team.owner, project=team.project, url=r.url(), events=["queued", "released"])
    hook_settings.E31_WEBHOOK_SEND_IN_THREAD = True
    pool_drain()
    started = time.monotonic()
    job = queued_job(team.member, project="ml-team")
    job_cancel(job=job, by=team.member)
    assert time.monotonic() - started < 1.0  # the submit and the release never waited on a try
    assert _wait_for(lambda: len(healthy.seen) == 2, within_s=3)
    assert [s.headers["e31-webhook-event"] for s in healthy.seen] == ["queued", "released"]
    assert _wait_for(lambda: WebhookDelivery.objects.filter(last_error__contains="timed out").count() == 2,
                     within_s=2 * (hook_settings.E31_WEBHOOK_CONNECT_TIMEOUT_S + hook_settings.E31_WEBHOOK_TIMEOUT_S))
    assert WebhookDelivery.objects.filter(status="delivered").count() == 2
