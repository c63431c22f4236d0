"""The notice reconcile (issue 26): release e-mails whose task was lost are sent late, once.

The release e-mail is a side task queued on commit of the release (:mod:`.receivers`). It is lost
when its worker is SIGKILLed mid-send (the broker hands it on only after its visibility timeout,
which lies above the 6 h verification) and dropped for good when the mail server fails it. Beat
runs :func:`release_emails_reconcile` every ``E31_NOTICE_RECONCILE_PERIOD_S``; it sends what is
missing through :func:`.services.release_email_send`, whose :class:`.models.NoticeSent` claim keeps
it to one mail per job whatever else runs at the same time.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q

from apps.core import clock
from apps.core.choices import JobState
from apps.jobs.models import Job

from .models import NoticeSent
from .services import release_email_send

log = logging.getLogger(__name__)


def release_emails_missing(*, now: datetime, settle_s: float, window_s: float, limit: int) -> list[int]:
    """Ids of released jobs, oldest release first (at most ``limit``), whose owner wants e-mail notices
    and has an address, released between ``window_s`` and ``settle_s`` seconds before ``now``
    (``settle_s``: the on-release task's own time to send; ``window_s``: how late a mail is still
    worth sending), released after the owner turned e-mail on, with no release e-mail sent."""
    sent = NoticeSent.objects.filter(job=OuterRef("pk"), kind=NoticeSent.Kind.RELEASE_EMAIL)
    return list(
        Job.objects.filter(state=JobState.RELEASED, released_at__lte=now - timedelta(seconds=settle_s),
                           released_at__gt=now - timedelta(seconds=window_s),
                           owner__notice_preference__email_on_release=True)
        .filter(Q(owner__notice_preference__email_on_since__isnull=True)
                | Q(released_at__gte=F("owner__notice_preference__email_on_since")))
        .exclude(owner__email="").exclude(Exists(sent))
        .order_by("released_at", "pk").values_list("pk", flat=True)[:limit])


def release_emails_reconcile(*, settle_s: float = 300, window_s: float = 86400, limit: int = 50,
                             budget_s: float = 30, now: datetime | None = None) -> int:
    """Send the release e-mails that are missing (:func:`release_emails_missing`); returns how many
    were sent.

    Each job is taken under ``SELECT ... FOR NO KEY UPDATE SKIP LOCKED`` for its send, so two runs at
    once (two beats, a slow run overlapping the next) split the jobs rather than wait on each other;
    the :class:`.models.NoticeSent` unique claim also stops a send that races the on-release task
    (or its redelivery). A send that fails (the mail server down or timing out after
    ``EMAIL_TIMEOUT``) is logged and left unclaimed for the next run. No job is started after
    ``budget_s`` seconds (wall, monotonic), so a run ends well inside the site's task time limit
    even with a silent mail server. Never raises for one job's mail.
    """
    deadline = time.monotonic() + budget_s
    sent = 0
    for job_id in release_emails_missing(now=now or clock.now(), settle_s=settle_s, window_s=window_s, limit=limit):
        if time.monotonic() > deadline:
            break
        try:
            with transaction.atomic():
                mine = Job.objects.select_for_update(skip_locked=True, no_key=True).filter(pk=job_id)
                if mine.values_list("pk", flat=True).first() is None:  # another run holds it
                    continue
                if release_email_send(job_id=job_id):
                    sent += 1
                    log.info("release e-mail of job %s sent late (reconcile)", job_id)
        except Exception:
            log.exception("release e-mail of job %s failed; the next reconcile tries again", job_id)
    return sent
