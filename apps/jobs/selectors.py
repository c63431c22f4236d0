"""Reads of jobs. Every read a user makes goes through one that filters by owner."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from apps.core.choices import JobState, Outcome

from .models import Job
from .reasons import end_words
from .services.logs import log_bytes


def jobs_of(user) -> QuerySet[Job]:
    """The user's own jobs, newest first. Anyone else's are simply not there."""
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(owner=user).order_by("-submitted_at", "-id")


SEARCH_MAX_CHARS = 100  # a job's name is at most 100 characters (Job.name)


@dataclass(frozen=True)
class JobFilter:
    """What "My jobs" is narrowed to: a part of the name (case-insensitive), a state, an outcome.

    Empty strings mean "any". Built by :func:`job_filter_parse`, which drops values that are not
    a state or an outcome, so a filter never fails.
    """

    q: str = ""
    state: str = ""
    outcome: str = ""

    @property
    def active(self) -> bool:
        """True when anything narrows the list (then arrays' tasks are listed one by one)."""
        return bool(self.q or self.state or self.outcome)

    def params(self) -> dict[str, str]:
        """The non-empty parts as GET parameters (for pagination links)."""
        return {k: v for k, v in (("q", self.q), ("state", self.state), ("outcome", self.outcome)) if v}


def job_filter_parse(params: Any) -> JobFilter:
    """A :class:`JobFilter` from GET parameters ``q``, ``state``, ``outcome`` (a QueryDict or dict).

    ``q`` is stripped and cut to :data:`SEARCH_MAX_CHARS`; a ``state`` or ``outcome`` that is
    not one of :class:`JobState` / :class:`Outcome` is ignored (the list shows all).
    """
    q = str(params.get("q", "") or "").strip()[:SEARCH_MAX_CHARS]
    state = params.get("state", "") or ""
    outcome = params.get("outcome", "") or ""
    return JobFilter(q=q, state=state if state in JobState.values else "",
                     outcome=outcome if outcome in Outcome.values else "")


def jobs_search(user, flt: JobFilter) -> QuerySet[Job]:
    """``user``'s own jobs narrowed by ``flt``, newest first; every job on its own (the tasks of
    an array too). Owner-scoped exactly as :func:`jobs_of`: anyone else's jobs are never there."""
    jobs = jobs_of(user)
    if flt.q:
        jobs = jobs.filter(name__icontains=flt.q)
    if flt.state:
        jobs = jobs.filter(state=flt.state)
    if flt.outcome:
        jobs = jobs.filter(outcome=flt.outcome)
    return jobs


def jobs_queued() -> QuerySet[Job]:
    """Queued jobs of everyone, in queue order (position, then submit time)."""
    return Job.objects.filter(state=JobState.QUEUED).order_by("queue_position", "submitted_at", "id")


def end_detail(job: Job) -> str:
    """Why a released job did not succeed, in its timeline's words ("" for a success or an
    unreleased job).

    The words are :func:`apps.jobs.reasons.end_words` (what ``status_message`` holds from the release on).
    A lost output is the job's ``status_note`` instead.
    """
    if job.state != JobState.RELEASED or job.outcome in ("", Outcome.SUCCEEDED):
        return ""
    release = job.events.filter(to_state=JobState.RELEASED).order_by("-seq").first()
    if release is None:
        return ""
    return end_words(job, released_from=release.from_state, release_detail=release.detail, before_seq=release.seq)
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
    attempt by default; from the database or, once compacted, from the log's storage object
    (:func:`apps.jobs.services.logs.log_bytes`)."""
    return log_bytes(job, attempt or job.attempt, rank, offset=offset, limit=limit)[0]


def job_visible_or_404(user, pk: int) -> Job:
    """Job ``pk`` for ``user`` to read: their own, or any job for staff (operators reading a
    tenant's usage charts).

    Raises:
        Http404: no such job, or someone else's and ``user`` is not staff (answered as if it did
            not exist).
    """
    if getattr(user, "is_authenticated", False) and user.is_staff:
        job = Job.objects.filter(pk=pk).first()
        if job is not None:
            return job
    return job_own_or_404(user, pk)
