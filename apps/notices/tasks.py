"""Celery tasks of notices. Thin: each calls one service."""
from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def release_email_task(job_id: int) -> None:
    """Send the release e-mail of job ``job_id`` if its owner wants one."""
    from .services import release_email_send

    release_email_send(job_id=job_id)


def enqueue_release_email(job_id: int) -> None:
    """Queue :func:`release_email_task` (called after the release commits; mail never blocks a report)."""
    release_email_task.delay(job_id)
