"""Notices sent outside the browser: the e-mail when a job is released, and the budget alerts' e-mails
(an account's, a project's)."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse

from apps.core import clock
from apps.core.choices import JobState
from apps.jobs.models import Job
from apps.metering.budget import budget_alert_of
from apps.metering.project_budget import project_budget_alert_of
from apps.projects.models import Membership, Role

from .models import BudgetNoticeSent, NoticePreference, NoticeSent, ProjectBudgetNoticeSent

log = logging.getLogger(__name__)


def email_on_release(user) -> bool:
    """Whether ``user`` turned e-mail notices on (default: no): sent when their jobs are released and
    when their month's spend passes their alert threshold."""
    return NoticePreference.objects.filter(owner=user, email_on_release=True).exists()


def preference_set(*, user, email_on_release: bool) -> NoticePreference:
    """Store ``user``'s choice; idempotent. Turning e-mail on stamps ``email_on_since`` (the clock's
    now), so the notice reconcile (:mod:`.reconcile`) never mails jobs released before the choice."""
    with transaction.atomic():
        pref, _ = NoticePreference.objects.select_for_update().get_or_create(owner=user)
        if email_on_release and not pref.email_on_release:
            pref.email_on_since = clock.now()
        pref.email_on_release = email_on_release
        pref.save(update_fields=["email_on_release", "email_on_since"])
    return pref


def release_email_send(*, job_id: int) -> bool:
    """E-mail the owner of released job ``job_id`` if they asked for it and have an address.

    Uses Django's mail backend (``EMAIL_BACKEND``: SMTP in production, the
    console in standalone; ``EMAIL_TIMEOUT`` bounds a silent server). Returns
    whether a mail was sent. Sent once per job even when the task is
    delivered twice (:class:`NoticeSent` is claimed in the sending
    transaction). Raises what the mail backend raises (the claim is then
    rolled back, so a retry may send).
    """
    job = Job.objects.select_related("owner").filter(pk=job_id, state=JobState.RELEASED).first()
    if job is None or not job.owner.email or not email_on_release(job.owner):
        return False
    context = {"job": job, "url": settings.E31_SITE_URL.rstrip("/") + job.get_absolute_url()}
    # A header may not hold a line break (Django raises BadHeaderError): the
    # name is the owner's text, so any control character becomes a space.
    name = "".join(" " if ch.isspace() or not ch.isprintable() else ch for ch in job.name)
    subject = f"Job {job.pk} ({name}) released: {job.get_outcome_display() or 'done'}"
    try:
        with transaction.atomic():
            NoticeSent.objects.create(job=job, kind=NoticeSent.Kind.RELEASE_EMAIL)
            send_mail(subject, render_to_string("notices/release_email.txt", context), None, [job.owner.email])
    except IntegrityError:  # another delivery of this task sent it
        return False
    return True


def budget_email_send(*, alert_id: int) -> bool:
    """E-mail the owner of budget alert ``alert_id`` if they turned e-mail notices on and have an address.

    Once per account and month (:class:`BudgetNoticeSent` claimed in the sending transaction, as
    :func:`release_email_send` does). Returns whether a mail was sent. Raises what the mail backend
    raises (the claim is then rolled back).
    """
    alert = budget_alert_of(alert_id)
    if alert is None or not alert.owner.email or not email_on_release(alert.owner):
        return False
    context = {"alert": alert, "url": settings.E31_SITE_URL.rstrip("/") + reverse("account:settings")}
    subject = f"E31: your spend passed {alert.threshold_percent}% of your {alert.month:%B %Y} limit"
    try:
        with transaction.atomic():
            BudgetNoticeSent.objects.create(owner=alert.owner, month=alert.month)
            send_mail(subject, render_to_string("notices/budget_email.txt", context), None, [alert.owner.email])
    except IntegrityError:  # already sent this month
        return False
    return True


def project_budget_email_send(*, alert_id: int) -> int:
    """E-mail project budget alert ``alert_id`` to each of the project's owners and admins who turned
    e-mail notices on and have an address, one mail each (no recipient sees another's address).

    Once per recipient, project and month (:class:`ProjectBudgetNoticeSent` claimed in each mail's
    sending transaction, as :func:`budget_email_send`), so a second delivery of the task, or one
    retried after a recipient's mail failed, sends only what is missing. Returns how many mails were
    sent. Raises what the mail backend raises (that recipient's claim is rolled back; those mailed
    before keep theirs).
    """
    alert = project_budget_alert_of(alert_id)
    if alert is None:
        return 0
    managers = (Membership.objects.filter(project_id=alert.project_id, role__in=(Role.OWNER, Role.ADMIN),
                                          user__is_active=True, user__notice_preference__email_on_release=True)
                .exclude(user__email="").select_related("user").order_by("user_id"))
    context = {"alert": alert, "project": alert.project,
               "url": settings.E31_SITE_URL.rstrip("/") + reverse("projects:detail", args=[alert.project.name])}
    subject = (f"E31: project {alert.project.name}'s spend passed {alert.threshold_percent}% of its "
               f"{alert.month:%B %Y} limit")
    body = render_to_string("notices/project_budget_email.txt", context)
    sent = 0
    for membership in managers:
        try:
            with transaction.atomic():
                ProjectBudgetNoticeSent.objects.create(project_id=alert.project_id, recipient=membership.user,
                                                       month=alert.month)
                send_mail(subject, body, None, [membership.user.email])
        except IntegrityError:  # already sent to this one this month
            continue
        sent += 1
    return sent
