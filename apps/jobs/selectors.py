"""Reads of jobs. Every read a user makes goes through one that filters by owner."""
from __future__ import annotations

from django.db.models import QuerySet

from apps.core.choices import JobState, Outcome

from .models import Job


def jobs_of(user) -> QuerySet[Job]:
    """The user's own jobs, newest first. Anyone else's are simply not there."""
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(owner=user).order_by("-submitted_at", "-id")


def jobs_queued() -> QuerySet[Job]:
    """Queued jobs of everyone, in queue order (position, then submit time)."""
    return Job.objects.filter(state=JobState.QUEUED).order_by("queue_position", "submitted_at", "id")


def end_detail(job: Job) -> str:
    """Why a released job did not succeed, in its timeline's words ("" for a success or an
    unreleased job).

    The reason is the move that ended the run (to ``output``: "command exited with code 3",
    "staging failed: ..."), or the release itself where no run ended first (node lost,
    cancelled in the queue). A lost output is the job's ``status_note`` instead.
    """
    if job.state != JobState.RELEASED or job.outcome in ("", Outcome.SUCCEEDED):
        return ""
    release = job.events.filter(to_state=JobState.RELEASED).order_by("-seq").first()
    if release is None:
        return ""
    if release.from_state == JobState.OUTPUT:
        ended = job.events.filter(to_state=JobState.OUTPUT, seq__lt=release.seq).order_by("-seq").first()
        return ended.detail if ended else ""
    return release.detail
