"""Reads of jobs. Every read a user makes goes through one that filters to what the user may see: their
own jobs and those of the projects they are a member of (:func:`apps.projects.access.shared_q`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from apps.core.choices import JobState, Outcome
from apps.projects.access import shared_q

from .models import Job
from .reasons import end_words
from .services.logs import log_bytes


def jobs_of(user) -> QuerySet[Job]:
    """The jobs ``user`` may see, newest first: their own and their projects' (any role). Anyone
    else's are simply not there."""
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(shared_q(user)).order_by("-submitted_at", "-id")


def project_name(job) -> str:
    """The name of the project ``job`` (or a job array) belongs to: ``~username`` for its owner's
    personal project, also when it has none recorded (jobs from before projects)."""
    if job.project_id is not None:
        return job.project.name
    return f"~{job.owner.get_username()}"


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
    project: str = ""

    @property
    def active(self) -> bool:
        """True when anything narrows the list (then arrays' tasks are listed one by one)."""
        return bool(self.q or self.state or self.outcome or self.project)

    def params(self) -> dict[str, str]:
        """The non-empty parts as GET parameters (for pagination links)."""
        return {k: v for k, v in (("q", self.q), ("state", self.state), ("outcome", self.outcome),
                                  ("project", self.project)) if v}


def job_filter_parse(params: Any) -> JobFilter:
    """A :class:`JobFilter` from GET parameters ``q``, ``state``, ``outcome``, ``project`` (a
    QueryDict or dict).

    ``q`` is stripped and cut to :data:`SEARCH_MAX_CHARS`; a ``state`` or ``outcome`` that is
    not one of :class:`JobState` / :class:`Outcome` is ignored (the list shows all); a
    ``project`` the user is not in lists nothing (as any name that matches no job).
    """
    q = str(params.get("q", "") or "").strip()[:SEARCH_MAX_CHARS]
    state = params.get("state", "") or ""
    outcome = params.get("outcome", "") or ""
    project = str(params.get("project", "") or "").strip()[:64]
    return JobFilter(q=q, state=state if state in JobState.values else "",
                     outcome=outcome if outcome in Outcome.values else "", project=project)


def jobs_search(user, flt: JobFilter) -> QuerySet[Job]:
    """The jobs ``user`` may see narrowed by ``flt``, newest first; every job on its own (the tasks
    of an array too). Scoped exactly as :func:`jobs_of`: no one else's jobs are ever there."""
    jobs = jobs_in_project(jobs_of(user), user, flt.project) if flt.project else jobs_of(user)
    if flt.q:
        jobs = jobs.filter(name__icontains=flt.q)
    if flt.state:
        jobs = jobs.filter(state=flt.state)
    if flt.outcome:
        jobs = jobs.filter(outcome=flt.outcome)
    return jobs


def jobs_in_project(jobs: QuerySet[Job], user, name: str) -> QuerySet[Job]:
    """``jobs`` narrowed to project ``name`` (``~username``: ``user``'s personal project, with the
    jobs from before projects). A name that is not one of ``user``'s projects narrows to none."""
    if name == f"~{user.get_username()}":
        return jobs.filter(Q(project__personal_of=user) | Q(project__isnull=True, owner=user))
    return jobs.filter(project__name=name)


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
    """Job ``pk`` as ``user`` may see it (theirs, or one of their projects'), for a page or an API
    call about one job. What they may do with it is :mod:`apps.projects.access`'s to say.

    Raises:
        Http404: no such job, or one ``user`` may not see (answered as if it did not exist).
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
