"""The release e-mail: once per job whatever the broker does, and never held by a silent server."""
from __future__ import annotations

import time

import pytest
from django.core import mail

from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.submit import job_submit
from apps.notices.models import NoticeSent
from apps.notices.services import preference_set, release_email_send

from ..drive import pool_drain
from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)  # the mail is queued on commit


@pytest.fixture
def mailed_owner(owner, pool, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    owner.email = "owner@example.com"
    owner.save()
    pool_drain()  # jobs wait in the queue
    return owner


def released_job(owner, name="job"):
    job = job_submit(owner=owner, document=spec(name=name))
    return job_cancel(job=job)


def test_it_sends_once_when_the_task_is_delivered_twice(mailed_owner):
    preference_set(user=mailed_owner, email_on_release=True)
    job = released_job(mailed_owner)  # the on-release task ran once (eager)
    assert len(mail.outbox) == 1
    assert release_email_send(job_id=job.pk) is False  # a second delivery
    assert len(mail.outbox) == 1
    assert NoticeSent.objects.filter(job=job).count() == 1


def test_a_name_with_a_newline_makes_a_one_line_subject(mailed_owner):
    preference_set(user=mailed_owner, email_on_release=True)
    job = released_job(mailed_owner, name="two\nlines")
    assert mail.outbox[-1].subject == f"Job {job.pk} (two lines) released: Cancelled"


def test_a_silent_mail_server_times_out_and_leaves_no_claim(mailed_owner, settings, silent_mail_server):
    job = released_job(mailed_owner)  # no preference yet: nothing sent
    preference_set(user=mailed_owner, email_on_release=True)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", silent_mail_server, False
    settings.EMAIL_TIMEOUT = 0.5
    started = time.monotonic()
    with pytest.raises(OSError):  # socket.timeout / TimeoutError
        release_email_send(job_id=job.pk)
    assert time.monotonic() - started < 5
    assert not NoticeSent.objects.filter(job=job).exists()  # a retry may still send it
