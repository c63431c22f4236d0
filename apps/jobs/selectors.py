"""Reads of jobs. Every read a user makes goes through one that filters by owner."""
from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404

from apps.core.choices import JobState, Outcome

from .models import Job, LogChunk


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
def job_own_or_404(user, pk: int) -> Job:
    """``user``'s job ``pk``, for a page or an API call about one job.

    Raises:
        Http404: no such job, or someone else's (answered as if it did not exist).
    """
    job = jobs_of(user).filter(pk=pk).first()
    if job is None:
        raise Http404

    return job


def log_read(job: Job, offset: int = 0, limit: int = 1024 * 1024, attempt: int | None = None,
             rank: int = 0) -> bytes:
    """Bytes of the job's log on node rank ``rank`` from ``offset`` (at most ``limit``), current
    attempt by default."""
    attempt = attempt or job.attempt
    chunks = LogChunk.objects.filter(job=job, attempt=attempt, node_rank=rank,
                                     offset__lt=offset + limit).order_by("offset")
    out = bytearray()
    for chunk in chunks.filter(offset__gte=max(0, offset - settings.E31_LOG_MAX_BYTES)):
        data = bytes(chunk.data)
        end = chunk.offset + len(data)
        if end <= offset:
            continue
        out += data[max(0, offset - chunk.offset):]
    return bytes(out[:limit])
