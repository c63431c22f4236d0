"""Notices' receivers of the jobs app's and the meter's signals (:mod:`apps.jobs.signals`,
:mod:`apps.metering.signals`)."""
from __future__ import annotations

from django.db import transaction

from apps.jobs import signals
from apps.metering import signals as metering_signals

from .tasks import enqueue_budget_email, enqueue_project_budget_email, enqueue_release_email


def on_job_released(*, job_id: int, **_: object) -> None:
    """Queue the release e-mail once the release commits (mail never blocks the release)."""
    transaction.on_commit(lambda: enqueue_release_email(job_id))


def on_budget_alert_raised(*, alert_id: int, **_: object) -> None:
    """Queue the budget alert e-mail once the alert commits (the beat task never waits on mail)."""
    transaction.on_commit(lambda: enqueue_budget_email(alert_id))


def on_project_budget_alert_raised(*, alert_id: int, **_: object) -> None:
    """Queue the project budget alert's e-mails once the alert commits."""
    transaction.on_commit(lambda: enqueue_project_budget_email(alert_id))


def connect() -> None:
    """Connect the receivers (``NoticesConfig.ready``); idempotent (``dispatch_uid``)."""
    signals.job_released.connect(on_job_released, dispatch_uid="notices.job_released")
    metering_signals.budget_alert_raised.connect(on_budget_alert_raised, dispatch_uid="notices.budget_alert_raised")
    metering_signals.project_budget_alert_raised.connect(on_project_budget_alert_raised,
                                                         dispatch_uid="notices.project_budget_alert_raised")
