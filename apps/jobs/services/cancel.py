"""Cancelling a job (SPEC §3): released at once while queued, else stopped by its agent."""
from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs.models import Job
from apps.jobs.state import event_add, transition
from apps.pool.notify import node_wake


class CancelEffect(StrEnum):
    """What a cancel did (the API says it, so a second cancel is not a silent 200)."""

    RELEASED = "released"  # it was queued: released at once, nothing billed
    STOPPING = "stopping"  # it held GPUs: the agent stops the run, billed up to the stop
    ALREADY_STOPPING = "already_stopping"  # a cancel was already asked; the stop is under way
    ALREADY_RELEASED = "already_released"  # nothing to do: it had ended


def job_cancel(*, job: Job, by: AbstractBaseUser | None = None) -> Job:
    """Cancel ``job``. Idempotent; see :func:`job_cancel_effect`."""
    return job_cancel_effect(job=job, by=by)[0]


@transaction.atomic
def job_cancel_effect(*, job: Job, by: AbstractBaseUser | None = None) -> tuple[Job, CancelEffect]:
    """Cancel ``job`` and say what that did. Idempotent.

    Queued: released at once with outcome ``cancelled``, nothing billed.
    Holding GPUs: the agent is told; it stops the process group (SIGTERM,
    SIGKILL after the grace period), packs what outputs exist and reports;
    the meter runs until the stop. A cancel is final: the job is never
    requeued after it, even if its node is lost (:func:`apps.jobs.services.recovery.jobs_handle_node_loss`).
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state == JobState.RELEASED:
        return job, CancelEffect.ALREADY_RELEASED
    if job.cancel_requested_at:
        return job, CancelEffect.ALREADY_STOPPING
    now = timezone.now()
    if job.state == JobState.QUEUED:
        job = transition(job, JobState.RELEASED, detail="cancelled while queued", now=now,
                         outcome=Outcome.CANCELLED, end_reason=EndReason.CANCELLED, cancel_requested_at=now)
        return job, CancelEffect.RELEASED
    Job.objects.filter(pk=job.pk).update(cancel_requested_at=now)
    job.cancel_requested_at = now
    event_add(job, detail="cancel requested", at=now)
    for node_id in job.leases.filter(attempt=job.attempt, released_at__isnull=True).values_list("node_id", flat=True):
        node_wake(node_id)
    return job, CancelEffect.STOPPING
