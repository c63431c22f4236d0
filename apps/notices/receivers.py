"""Notices' receiver of the jobs app's signals (:mod:`apps.jobs.signals`)."""
from __future__ import annotations

from django.db import transaction

from apps.jobs import signals

from .tasks import enqueue_release_email


def on_job_released(*, job_id: int, **_: object) -> None:
    """Queue the release e-mail once the release commits (mail never blocks the release)."""
    transaction.on_commit(lambda: enqueue_release_email(job_id))


def connect() -> None:
    """Connect the receivers (``NoticesConfig.ready``); idempotent (``dispatch_uid``)."""
    signals.job_released.connect(on_job_released, dispatch_uid="notices.job_released")
