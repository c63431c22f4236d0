"""Celery tasks of the meter (the default ``side`` queue). Thin: each calls one service."""
from __future__ import annotations

from celery import shared_task

from .budget import budget_alerts_scan
from .project_budget import project_alerts_scan


@shared_task(ignore_result=True)
def budget_alerts_task() -> None:
    """Raise the budget alerts due, the accounts' (:func:`apps.metering.budget.budget_alerts_scan`) and
    the projects' (:func:`apps.metering.project_budget.project_alerts_scan`); Celery beat runs it."""
    budget_alerts_scan()
    project_alerts_scan()
