"""Celery tasks of notices. Thin: each calls one service."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from . import reconcile, services

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def release_email_task(job_id: int) -> None:
    """Send the release e-mail of job ``job_id`` if its owner wants one."""
    services.release_email_send(job_id=job_id)


@shared_task(ignore_result=True)
def release_emails_reconcile_task() -> None:
    """Send the release e-mails a lost or failed task left unsent (:func:`.reconcile.release_emails_reconcile`);
    Celery beat runs it every ``E31_NOTICE_RECONCILE_PERIOD_S``."""
    sent = reconcile.release_emails_reconcile(settle_s=settings.E31_NOTICE_RECONCILE_SETTLE_S,
                                              window_s=settings.E31_NOTICE_RECONCILE_WINDOW_S)
    if sent:
        log.info("notice reconcile: %s release e-mail(s) sent late", sent)


def enqueue_release_email(job_id: int) -> None:
    """Queue :func:`release_email_task` (called after the release commits; mail never blocks a report).

    Never raises: a notice that cannot be queued or sent (eager Celery runs
    the task right here) is logged, and the agent's report that released the
    job still gets its 200 (once a 500, then a 409 on the retry: job dropped).
    """
    try:
        release_email_task.delay(job_id)
    except Exception:
        log.exception("release notice for job %s failed", job_id)


@shared_task(ignore_result=True)
def budget_email_task(alert_id: int) -> None:
    """Send the budget alert e-mail of alert ``alert_id`` if its owner wants e-mail notices."""
    services.budget_email_send(alert_id=alert_id)


def enqueue_budget_email(alert_id: int) -> None:
    """Queue :func:`budget_email_task` after the alert commits. Never raises (logged), as
    :func:`enqueue_release_email`."""
    try:
        budget_email_task.delay(alert_id)
    except Exception:
        log.exception("budget notice for alert %s failed", alert_id)


@shared_task(ignore_result=True)
def project_budget_email_task(alert_id: int) -> None:
    """Send project budget alert ``alert_id``'s e-mails to the project's owners and admins who want them."""
    services.project_budget_email_send(alert_id=alert_id)


def enqueue_project_budget_email(alert_id: int) -> None:
    """Queue :func:`project_budget_email_task` after the alert commits. Never raises (logged), as
    :func:`enqueue_release_email`."""
    try:
        project_budget_email_task.delay(alert_id)
    except Exception:
        log.exception("project budget notice for alert %s failed", alert_id)
