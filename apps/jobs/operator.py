"""Operator actions on every job at once (SPEC §3: a cancel by the operator)."""
from __future__ import annotations

from apps.core.choices import HOLDING, JobState
from apps.jobs.services.cancel import job_cancel_effect

from .models import Job
from .state import event_add


def jobs_stop_holding(*, reason: str) -> list[int]:
    """Cancel, as the operator, every job that holds GPUs now, so each ends ``cancelled`` with its
    outputs packed (the agents stop the command with its grace period, pack and upload), billed up
    to the stop. Used when the site itself is stopped on purpose (``make run``'s Ctrl-C).

    Args:
        reason: plain words for each job's timeline ("the site was stopped by its operator").
    Returns:
        The ids of the jobs asked to stop (queued jobs are left in the queue for the next start).
    """
    stopped = []
    for job in Job.objects.filter(state__in=HOLDING, cancel_requested_at__isnull=True).order_by("id"):
        job, _ = job_cancel_effect(job=job, by=None)
        if job.state != JobState.RELEASED:
            event_add(job, detail=f"stopped by the operator: {reason}")
        stopped.append(job.pk)
    return stopped


def jobs_holding(ids: list[int]) -> int:
    """How many of ``ids`` still hold GPUs (not yet released)."""
    return Job.objects.filter(pk__in=ids, state__in=HOLDING).count()
