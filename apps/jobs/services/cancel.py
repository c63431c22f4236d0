"""Cancelling a job (SPEC §3): released at once while queued, else stopped by its agent."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction

from apps.core import clock
from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs.models import Job
from apps.jobs.state import event_add, transition
from apps.pool.notify import node_wake
from apps.projects.access import Action, may_cancel, refusal, role_of, shared_q


class CancelEffect(StrEnum):
    """What a cancel did (the API says it, so a second cancel is not a silent 200)."""

    RELEASED = "released"  # it was queued: released at once, nothing billed
    STOPPING = "stopping"  # it held GPUs: the agent stops the run, billed up to the stop
    ALREADY_STOPPING = "already_stopping"  # a cancel was already asked; the stop is under way
    ALREADY_RELEASED = "already_released"  # nothing to do: it had ended


def job_cancel(*, job: Job, by: AbstractBaseUser | None = None, now: datetime | None = None) -> Job:
    """Cancel ``job``. Idempotent; see :func:`job_cancel_effect`."""
    return job_cancel_effect(job=job, by=by, now=now)[0]


@transaction.atomic
def job_cancel_effect(*, job: Job, by: AbstractBaseUser | None = None,
                      now: datetime | None = None) -> tuple[Job, CancelEffect]:
    """Cancel ``job`` and say what that did. Idempotent.

    Queued: released at once with outcome ``cancelled``, nothing billed.
    Holding GPUs: the agent is told; it stops the process group (SIGTERM,
    SIGKILL after the grace period), packs what outputs exist and reports;
    the meter runs until the stop. A cancel is final: the job is never
    requeued after it, even if its node is lost (:func:`apps.jobs.services.recovery.jobs_handle_node_loss`).
    ``now`` stamps the cancel (default :func:`apps.core.clock.now`). A cancel by a user other than
    the owner (a project's admin or owner) names them in the job's events.

    Raises:
        PermissionDenied: ``by`` may see the job but not cancel it (a viewer, or a member cancelling
            a teammate's job), with :func:`apps.projects.access.refusal`'s words.
    """
    by_other = check_canceller(job, by)
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state == JobState.RELEASED:
        return job, CancelEffect.ALREADY_RELEASED
    if job.cancel_requested_at:
        return job, CancelEffect.ALREADY_STOPPING
    now = now or clock.now()
    if job.state == JobState.QUEUED:
        job = transition(job, JobState.RELEASED, detail="cancelled while queued" + by_other, now=now,
                         outcome=Outcome.CANCELLED, end_reason=EndReason.CANCELLED, cancel_requested_at=now)
        return job, CancelEffect.RELEASED
    Job.objects.filter(pk=job.pk).update(cancel_requested_at=now)
    job.cancel_requested_at = now
    event_add(job, detail="cancel requested" + by_other, at=now)
    for node_id in job.leases.filter(attempt=job.attempt, released_at__isnull=True).values_list("node_id", flat=True):
        node_wake(node_id)
    return job, CancelEffect.STOPPING


def check_canceller(job, by: AbstractBaseUser | None) -> str:
    """" by USER" when ``by`` is a user other than the owner who may cancel ``job``, "" for the owner
    or the system (``by`` None); raises PermissionDenied otherwise. ``job`` may be a job array."""
    if by is None or by.pk == job.owner_id:
        return ""
    if not may_cancel(by, job):
        project = job.project.name if job.project_id else f"~{job.owner.get_username()}"
        raise PermissionDenied(refusal(project, role_of(by, job.project_id), Action.CANCEL_ANY))
    return f" by {by.get_username()}"


BULK_CANCEL_MAX = 500  # ids in one bulk cancel (ten pages of "My jobs")


@dataclass(frozen=True)
class BulkCancelled:
    """What a bulk cancel did, counted over the caller's own jobs only.

    ``released``: queued jobs released at once; ``stopping``: running ones whose agent was told
    to stop; ``already``: jobs already ending or ended (nothing done). Ids that are not the
    caller's jobs are not counted anywhere, so the answer says nothing about them.
    """

    released: int = 0
    stopping: int = 0
    already: int = 0

    @property
    def cancelled(self) -> int:
        """Jobs this call cancelled (released now or told to stop)."""
        return self.released + self.stopping


class BulkCancelError(ValueError):
    """The ids of a bulk cancel are not a list of at most :data:`BULK_CANCEL_MAX` job ids."""

    field = "ids"


def bulk_ids_parse(values: Iterable[object]) -> list[int]:
    """Job ids from a form or JSON list: positive integers, duplicates dropped, order kept.

    Raises:
        BulkCancelError: a value is not a positive integer, or more than :data:`BULK_CANCEL_MAX`.
    """
    ids: list[int] = []
    for value in values:
        text = str(value).strip()
        if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 18 or int(text) < 1:
            raise BulkCancelError(f"ids: {text[:20]!r} is not a job id")
        if int(text) not in ids:
            ids.append(int(text))
    if len(ids) > BULK_CANCEL_MAX:
        raise BulkCancelError(f"ids: at most {BULK_CANCEL_MAX} jobs at once, got {len(ids)}")
    return ids


def jobs_cancel_bulk(*, owner: AbstractBaseUser, ids: Iterable[int]) -> BulkCancelled:
    """Cancel those of ``ids`` that ``owner`` may cancel (theirs, and any job of a project where they
    are an admin or owner), each as :func:`job_cancel_effect` does
    (its own transaction: queued jobs released at once, running ones stopped by their agent,
    each one's release e-mail and live row as for a single cancel). Idempotent.

    Ids of jobs ``owner`` may not cancel, or of no job, are skipped without a trace.
    """
    released = stopping = already = 0
    for job in Job.objects.filter(shared_q(owner), pk__in=list(ids)).order_by("pk"):
        try:  # the one check (check_canceller): a teammate's job costs one role read
            _, effect = job_cancel_effect(job=job, by=owner)
        except PermissionDenied:
            continue
        if effect == CancelEffect.RELEASED:
            released += 1
        elif effect == CancelEffect.STOPPING:
            stopping += 1
        else:
            already += 1
    return BulkCancelled(released, stopping, already)
