"""Job dependencies (SPEC §2 ``after``, §3; issue 25 item 7), after Slurm's ``--dependency=afterok``.

A job with ``after: [{job: 41}]`` (or ``{array: 7}``, ``when: succeeded`` or ``ended``) stays
queued, unbilled and out of the scheduler's plan, with the pending reason "waiting for job 41 to
succeed", until every entry is met; then it is placed like any job, its queue place its submit
time. When an entry can no longer be met (job 41 was released failed, for ``when: succeeded``),
the job is released ``cancelled`` through :func:`apps.jobs.state.transition` with the reason ("job
41 failed: its dependency can no longer be met").

- :func:`after_errors`: the submit's check (only jobs and arrays the submitter may see).
- :func:`dependencies_store`: the rows (:class:`~apps.jobs.models.JobDependency`) of a submit.
- :func:`dependencies_settle`: the rule, for every queued job with dependencies (each scheduling
  cycle, through :meth:`apps.jobs.queue.DatabaseJobQueue.held_back`) or only the dependents of
  some jobs (:func:`on_job_released`, when a dependency is released).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Min, Q

from apps.core import clock
from apps.core.choices import EndReason, JobState, Outcome
from apps.projects.access import shared_q

from .models import Job, JobArray, JobDependency
from .spec import JobSpec
from .state import TransitionError, transition

# How a released job's outcome reads in the reason of a dependency that can no longer be met.
_ENDED_WORDS = {Outcome.FAILED: "failed", Outcome.TIMED_OUT: "timed out", Outcome.CANCELLED: "was cancelled",
                Outcome.NODE_LOST: "was lost with its node"}
UNMET = "its dependency can no longer be met"


def after_errors(spec: JobSpec, *, owner) -> dict[str, list[str]]:
    """Errors of ``spec.after``: an entry naming a job or an array that ``owner`` may not see (theirs
    or their projects', :func:`apps.projects.access.shared_q`), or that does not exist (the same
    words, so nobody learns another user's ids), keyed ``after[i]``. Two queries at most, whatever
    the length."""
    jobs = {item.job for item in spec.after if item.job is not None}
    arrays = {item.array for item in spec.after if item.array is not None}
    seen = shared_q(owner)
    own_jobs = set(Job.objects.filter(seen, pk__in=jobs).values_list("pk", flat=True)) if jobs else set()
    own_arrays = set(JobArray.objects.filter(seen, pk__in=arrays).values_list("pk", flat=True)) if arrays else set()
    errors: dict[str, list[str]] = {}
    for index, item in enumerate(spec.after):
        if item.job is not None and item.job not in own_jobs:
            errors[f"after[{index}]"] = [f"You have no job {item.job}."]
        elif item.array is not None and item.array not in own_arrays:
            errors[f"after[{index}]"] = [f"You have no array {item.array}."]
    return errors


def dependencies_store(after: Sequence[Mapping[str, Any]], *, job_id: int | None = None,
                       array_id: int | None = None) -> None:
    """Write the :class:`JobDependency` rows of the stored spec's ``after`` for job ``job_id``, or for
    every task of array ``array_id`` (one ``INSERT ... SELECT`` per entry, however many tasks).
    Call inside the submit's transaction, after the jobs are saved."""
    if not after:
        return
    if job_id is not None:
        JobDependency.objects.bulk_create([
            JobDependency(job_id=job_id, index=i, on_job_id=item.get("job"), on_array_id=item.get("array"),
                          when=item.get("when") or JobDependency.When.SUCCEEDED) for i, item in enumerate(after)])
        return
    quote = connection.ops.quote_name
    table, jobs = quote(JobDependency._meta.db_table), quote(Job._meta.db_table)
    with connection.cursor() as cursor:
        for i, item in enumerate(after):
            cursor.execute(
                f"INSERT INTO {table} (job_id, {quote('index')}, on_job_id, on_array_id, {quote('when')}) "
                f"SELECT id, %s, %s, %s, %s FROM {jobs} WHERE array_id = %s",
                [i, item.get("job"), item.get("array"), item.get("when") or JobDependency.When.SUCCEEDED, array_id])


@dataclass(frozen=True)
class _ArrayState:
    total: int
    released: int
    first_bad: tuple[int, str] | None  # (job id, outcome) of the first task released other than succeeded


def _array_states(array_ids: Iterable[int]) -> dict[int, _ArrayState]:
    """How far the tasks of each array are: two aggregate queries."""
    ids = set(array_ids)
    if not ids:
        return {}
    bad = ~Q(outcome=Outcome.SUCCEEDED) & Q(state=JobState.RELEASED)
    rows = (Job.objects.filter(array_id__in=ids).values("array_id").order_by()
            .annotate(total=Count("id"), released=Count("id", filter=Q(state=JobState.RELEASED)),
                      bad=Min("id", filter=bad)))
    bad_ids = [r["bad"] for r in rows if r["bad"] is not None]
    outcomes = dict(Job.objects.filter(pk__in=bad_ids).values_list("pk", "outcome")) if bad_ids else {}
    return {r["array_id"]: _ArrayState(r["total"], r["released"],
                                       (r["bad"], outcomes[r["bad"]]) if r["bad"] is not None else None)
            for r in rows}


def _ended_words(what: str, outcome: str | None) -> str:
    return f"{what} {_ENDED_WORDS.get(outcome or '', 'ended without succeeding')}"


def _verdicts(rows: list[tuple]) -> tuple[dict[int, str], dict[int, str]]:
    """``(waiting, broken)``: the pending reason of each job with an entry not met yet, and the release
    reason of each job with an entry that can no longer be met. ``rows`` are ``(job_id, on_job_id,
    on_array_id, when, on_job_state, on_job_outcome)`` in entry order."""
    arrays = _array_states(r[2] for r in rows if r[2] is not None)
    unmet: dict[int, list[str]] = {}
    broken: dict[int, str] = {}
    for job_id, on_job, on_array, when, state, outcome in rows:
        if job_id in broken:
            continue
        verb = "succeed" if when == JobDependency.When.SUCCEEDED else "end"
        if on_job is not None:
            if state != JobState.RELEASED:
                unmet.setdefault(job_id, []).append(f"job {on_job} to {verb}")
            elif when == JobDependency.When.SUCCEEDED and outcome != Outcome.SUCCEEDED:
                broken[job_id] = f"{_ended_words(f'job {on_job}', outcome)}: {UNMET}"
            continue
        tasks = arrays.get(on_array)
        if tasks is None:
            continue  # an array without tasks (none are made so): nothing to wait for
        if when == JobDependency.When.SUCCEEDED and tasks.first_bad is not None:
            bad_id, bad_outcome = tasks.first_bad
            broken[job_id] = f"{_ended_words(f'job {bad_id} of array {on_array}', bad_outcome)}: {UNMET}"
        elif tasks.released < tasks.total:
            unmet.setdefault(job_id, []).append(f"array {on_array} to {verb}")
    waiting = {job_id: f"waiting for {names[0]}" + (f" (and {len(names) - 1} more)" if len(names) > 1 else "")
               for job_id, names in unmet.items() if job_id not in broken}
    return waiting, broken


def dependencies_settle(*, now: datetime | None = None, on_jobs: Iterable[int] | None = None,
                        on_arrays: Iterable[int] | None = None, released: set[int] | None = None) -> dict[int, str]:
    """Apply the rule to queued jobs with dependencies: those with an entry that can no longer be met
    are released ``cancelled`` (:func:`~apps.jobs.state.transition`: outcome and end reason
    ``cancelled``, the reason in ``status_message`` and the timeline), at ``now`` (default the clock).

    Args:
        on_jobs, on_arrays: only the jobs waiting for these jobs or arrays (both None: every queued job
            with dependencies, as each scheduling cycle asks).
        released: a set the ids of the jobs released here are added to.

    Returns:
        The queued jobs still waiting, by id, with their pending reason ("waiting for job 41 to
        succeed", "waiting for array 7 to end (and 2 more)"); a job whose entries are all met is not there.
    """
    deps = JobDependency.objects.filter(job__state=JobState.QUEUED)
    if on_jobs is not None or on_arrays is not None:
        waiting_jobs = JobDependency.objects.filter(Q(on_job_id__in=list(on_jobs or ()))
                                                    | Q(on_array_id__in=list(on_arrays or ())))
        deps = deps.filter(job_id__in=waiting_jobs.values("job_id"))
    rows = list(deps.order_by("job_id", "index").values_list(
        "job_id", "on_job_id", "on_array_id", "when", "on_job__state", "on_job__outcome"))
    if not rows:
        return {}
    waiting, broken = _verdicts(rows)
    if broken:
        now = now or clock.now()
        for job in Job.objects.filter(pk__in=list(broken), state=JobState.QUEUED).order_by("pk"):
            try:
                transition(job, JobState.RELEASED, detail=broken[job.pk], now=now, outcome=Outcome.CANCELLED,
                           end_reason=EndReason.CANCELLED, status_message=broken[job.pk])
                if released is not None:
                    released.add(job.pk)
            except TransitionError:
                continue  # cancelled by its owner meanwhile
    return waiting


@dataclass(frozen=True)
class Dependents:
    """The jobs whose ``after`` names a job (for its page): the first ids, and how many more."""

    shown: list[int]
    more: int


def dependents_of(job: Job, *, limit: int = 20) -> Dependents:
    """The jobs that name ``job`` or its array in their ``after``, oldest first: ``limit`` ids and a
    count of the rest. Only the owner's own jobs can name it (:func:`after_errors`). Two small queries."""
    target = Q(on_job_id=job.pk) | (Q(on_array_id=job.array_id) if job.array_id else Q(pk__in=[]))
    ids = JobDependency.objects.filter(target).order_by("job_id").values_list("job_id", flat=True).distinct()
    shown = list(ids[:limit])
    more = ids.count() - len(shown) if len(shown) == limit else 0
    return Dependents(shown, more)


_settling = threading.local()


def on_job_released(*, job_id: int, **_: Any) -> None:
    """The ``job_released`` receiver (in the release's transaction): settle the jobs waiting for job
    ``job_id`` or for its array. A release this causes sends the signal again; those are settled by
    the loop here, not by recursion, so a long chain ends in one pass without a deep stack."""
    pending: list[int] | None = getattr(_settling, "pending", None)
    if pending is not None:
        pending.append(job_id)
        return
    _settling.pending = pending = [job_id]
    try:
        while pending:
            ids = list(dict.fromkeys(pending))
            pending.clear()
            arrays = set(Job.objects.filter(pk__in=ids, array__isnull=False).values_list("array_id", flat=True))
            if not JobDependency.objects.filter(Q(on_job_id__in=ids) | Q(on_array_id__in=arrays)).exists():
                continue  # the usual case: nobody waits for these
            dependencies_settle(on_jobs=ids, on_arrays=arrays)
    finally:
        _settling.pending = None
