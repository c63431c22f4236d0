"""The end of an attempt (SPEC §3, retries): the job is released with its outcome, or, when its
``retry`` covers that outcome and attempts are left, it goes back to the queue as the next attempt.

After SkyPilot's ``max_restarts_on_errors`` and Slurm's ``--requeue``: a lost node is always
retried while attempts are left (the platform's fault, never charged); ``retry.on`` adds ``failed``
and ``timed_out``, which are billed as any attempt; a cancel is final. The retried job keeps its
place in the queue (the queue orders by submit time) and its ``max_attempts``.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings

from apps.core.choices import JobState, Outcome
from apps.jobs.models import Job
from apps.jobs.reasons import end_words
from apps.jobs.services.usage import job_usage_record
from apps.jobs.state import transition

# What a job's spec says when it has no ``retry``: the site's attempts, on node loss only.
DEFAULT_RETRY_ON = frozenset({Outcome.NODE_LOST})


def retry_attempts(spec: Mapping[str, Any]) -> int:
    """Attempts a job of ``spec`` (the stored document) may have in all: ``retry.attempts``, else
    the site's ``E31_MAX_ATTEMPTS``."""
    retry = spec.get("retry") or {}
    return int(retry.get("attempts") or settings.E31_MAX_ATTEMPTS)


def retry_covers(job: Job, outcome: str) -> bool:
    """True when ``job``'s ended attempt with ``outcome`` is retried: attempts are left, no cancel
    was asked, and the outcome is a node loss or one ``retry.on`` names."""
    if job.cancel_requested_at is not None or job.attempt >= job.max_attempts:
        return False
    if outcome == Outcome.NODE_LOST:
        return True
    return outcome in set((job.spec.get("retry") or {}).get("on") or DEFAULT_RETRY_ON)


def job_requeue(job: Job, *, detail: str, status_message: str = "", now: datetime | None = None) -> Job:
    """Put ``job`` back in the queue as its next attempt (attempt + 1), the run's columns cleared;
    ``detail`` for the timeline, ``status_message`` (why it was retried) shown until it is rented.

    Raises:
        TransitionError: the job moved meanwhile.
    """
    return transition(job, JobState.QUEUED, detail=detail, now=now, attempt=job.attempt + 1, rented_at=None,
                      run_started_at=None, run_ended_at=None, exit_code=None, end_reason="",
                      status_message=status_message[:500], log_size=0, log_truncated=False,
                      staging_bytes_done=0, staging_bytes_total=None)


def attempt_release(job: Job, *, outcome: Outcome, detail: str, now: datetime, status_message: str = "") -> Job:
    """The ended attempt of ``job`` (in ``output``, its leases released): the attempt's usage is fed
    to fair share, then the job is released with ``outcome`` (timeline ``detail``, ``status_message``
    the reason when its output was lost), or retried (:func:`retry_covers`): back in the queue as
    "attempt k+1 of N", the timeline and ``status_message`` saying why.

    Raises:
        TransitionError: the job moved meanwhile.
    """
    job_usage_record(job, now)
    if not retry_covers(job, outcome):
        return transition(job, JobState.RELEASED, detail=detail, now=now, outcome=outcome,
                          status_message=status_message)
    ended = status_message or end_words(job, released_from=job.state, release_detail=detail) or outcome.label.lower()
    why = f"attempt {job.attempt} {outcome.label.lower()} ({ended})"
    return job_requeue(job, now=now, detail=f"{why}; retried as attempt {job.attempt + 1} of {job.max_attempts}",
                       status_message=f"retry {job.attempt + 1} of {job.max_attempts}: {why}")

