"""The notice reconcile (issue 26): a release e-mail whose task died with its worker, or that the mail
server dropped, is sent by beat's reconcile a few minutes later, once, however many runs race."""
from __future__ import annotations

import threading
import time

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend
from django.db import connection

from apps.notices import receivers
from apps.notices.models import NoticeSent
from apps.notices.reconcile import release_emails_reconcile
from apps.notices.services import preference_set
from e31site.celery import app

from ..drive import finished_job

pytestmark = pytest.mark.django_db(transaction=True)  # the mail is queued on commit; threads see commits

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"


class SlowBackend(EmailBackend):
    """The locmem outbox behind a mail server that takes half a second per send."""

    def send_messages(self, messages):
        time.sleep(0.5)
        return super().send_messages(messages)


@pytest.fixture
def mailed_owner(frozen_clock, owner, pool, settings):
    settings.EMAIL_BACKEND = LOCMEM
    owner.email = "owner@example.com"
    owner.save()
    preference_set(user=owner, email_on_release=True)
    return owner


@pytest.fixture
def lost_task(monkeypatch):
    """The on-release task never sends: its side worker was SIGKILLed mid-send (the broker holds it
    unacked for the visibility timeout, hours)."""
    monkeypatch.setattr(receivers, "enqueue_release_email", lambda job_id: None)


def test_it_sends_a_mail_the_mail_server_dropped_once(mailed_owner, frozen_clock, settings, silent_mail_server):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", silent_mail_server, False
    settings.EMAIL_TIMEOUT = 0.5
    job, _ = finished_job(mailed_owner, clock=frozen_clock, run_s=10)  # the send timed out (logged)
    assert job.state == "released"
    assert not NoticeSent.objects.filter(job=job).exists()
    settings.EMAIL_BACKEND = LOCMEM  # the mail server is back
    assert release_emails_reconcile() == 0  # too soon: the on-release task may still be sending
    frozen_clock.advance(301)
    assert release_emails_reconcile() == 1
    assert [m.subject for m in mail.outbox] == [f"Job {job.pk} (web-job) released: Succeeded"]
    assert release_emails_reconcile() == 0  # run twice: still one mail
    assert len(mail.outbox) == 1
    assert NoticeSent.objects.filter(job=job).count() == 1


def test_two_runs_at_once_send_one_mail(mailed_owner, frozen_clock, settings, lost_task):
    job, _ = finished_job(mailed_owner, clock=frozen_clock)
    assert mail.outbox == []
    frozen_clock.advance(600)
    settings.EMAIL_BACKEND = f"{__name__}.SlowBackend"
    start, results = threading.Barrier(2), []

    def run() -> None:
        try:
            start.wait()
            results.append(release_emails_reconcile())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 1]
    assert [m.to for m in mail.outbox] == [["owner@example.com"]]
    assert NoticeSent.objects.filter(job=job).count() == 1


def test_it_leaves_alone_old_releases_and_those_before_email_was_wanted(frozen_clock, owner, pool, settings,
                                                                        lost_task):
    settings.EMAIL_BACKEND = LOCMEM
    owner.email = "owner@example.com"
    owner.save()
    preference_set(user=owner, email_on_release=True)
    finished_job(owner, clock=frozen_clock)  # its mail lost, then a day passes
    frozen_clock.advance(hours=25)
    preference_set(user=owner, email_on_release=False)
    finished_job(owner, clock=frozen_clock)  # released while e-mail was off
    frozen_clock.advance(60)
    preference_set(user=owner, email_on_release=True)
    frozen_clock.advance(600)
    assert release_emails_reconcile() == 0
    assert mail.outbox == []


def test_beat_runs_the_reconcile(settings):
    app.loader.import_default_modules()
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "apps.notices.tasks.release_emails_reconcile_task" in tasks
    assert "apps.notices.tasks.release_emails_reconcile_task" in app.tasks
