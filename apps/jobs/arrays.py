"""Job arrays (SPEC §2 ``array``, issue 10 item 5): N tasks from one spec, like Slurm's
``--array`` or Modal's ``.map()``.

Writes (:func:`array_submit`, :func:`array_cancel`) and reads (:func:`arrays_of`,
:func:`array_counts`) of :class:`~apps.jobs.models.JobArray`. Each task is an ordinary
:class:`~apps.jobs.models.Job` (``array``, ``array_index``) that the scheduler, the agent and
the meter treat like any other; its agent sets ``E31_ARRAY_INDEX`` and ``E31_ARRAY_SIZE``
from the work answer (:func:`apps.pool.selectors._assignment`).

Built for 10,000 tasks in one request: the spec is validated once, the spend limit checked
once for N times one task's worst case, task 0 is saved and the others are inserted as its
copies by one ``INSERT ... SELECT`` (their "submitted" events likewise), and one scheduling
cycle and one live message are asked for after commit, not N.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from django.http import Http404

from apps.artifacts.models import Upload
from apps.core import clock
from apps.core.choices import HOLDING, EndReason, JobState, Outcome
from apps.projects.access import shared_q

from . import signals
from .dependencies import dependencies_store
from .models import Job, JobArray, JobEvent
from .selectors import jobs_of
from .services.cancel import check_canceller, job_cancel
from .services.submit import after_submit, job_submit, spec_uploads_lock, spec_validate, unsaved_job
from .spec import SpecError, compute_request, spec_document
from .spend import spend_limit_enforce
from .state import transition_bulk


@dataclass(frozen=True)
class ArraySubmitted:
    """What :func:`array_submit` made: the array and its tasks' job ids, by index."""

    array: JobArray
    job_ids: list[int]


def array_submit(*, owner: AbstractBaseUser, document: Any,
                 attachments: Mapping[str, Upload] | None = None,
                 now: datetime | None = None) -> ArraySubmitted:
    """Accept a spec with ``array: N``: one :class:`JobArray` and N queued jobs, in one transaction.

    Task ``i`` (0..N-1) gets ``array_index = i``; every task has the same spec (without
    ``array``), so they differ only by ``E31_ARRAY_INDEX`` at run time.

    Raises:
        SpecError: the spec is invalid (``array`` outside 1..10,000 is ``{"array": [...]}``),
            no known node could ever hold one task, or N times one task's worst case exceeds
            what is left of the owner's monthly spend limit (``{"compute": [...]}``).
    """
    spec = spec_validate(document, owner=owner, attachments=attachments)  # once, for all N
    size = spec.array
    if size is None:
        raise SpecError({"array": ["This field is required: the number of tasks."]})
    if spec.output.retention_days is None:
        spec.output.retention_days = settings.E31_RETENTION_DAYS_DEFAULT
    first = unsaved_job(spec, owner, now=now)  # task 0 through the ORM; the others are its copies
    first.spec = spec_document(spec, exclude={"array"})
    first.submitted_at = now = now or first.submitted_at
    first.event_seq = 1  # the "submitted" event below; no other writer knows the job yet
    with transaction.atomic():
        spec_uploads_lock(owner, spec)  # the storage sweep cannot delete one meanwhile (issue 15)
        # One check for the whole array's worst case (SpecError if over).
        spend_limit_enforce(owner=owner, request=compute_request(first.spec["compute"]), tasks=size, now=now,
                            project_id=spec._project_id)
        first.array = JobArray.objects.create(owner=owner, project_id=spec._project_id, name=spec.name, size=size,
                                              submitted_at=now, spec=spec_document(spec))
        first.array_index = 0
        first.save()
        array = first.array
        job_ids = [first.pk] + _copy_job(first.pk, size - 1)
        _events_submitted(array, detail=f"submitted (array {array.pk} of {size:,} tasks)")
        dependencies_store(first.spec.get("after") or [], array_id=array.pk)  # every task waits the same
        # One row on the owner's live "My jobs" (task 0 stands for the array), one pool
        # push and one scheduling cycle for all N.
        after_submit(owner.pk, [first.pk])
    return ArraySubmitted(array, job_ids)


def _copy_job(job_id: int, count: int) -> list[int]:
    """Insert ``count`` copies of job ``job_id`` with ``array_index`` 1..count, in one statement.

    ``INSERT ... SELECT`` from the row itself: every column keeps its type and value without
    a Python object, a JSON encoding or a parameter per row (``bulk_create`` of 10,000 jobs
    takes ~1.5 s here, this ~0.1 s; benchmarks/array_submit.py). Portable SQL (a recursive
    CTE counts; PostgreSQL and SQLite >= 3.35 have ``RETURNING``).

    Returns:
        The new jobs' ids, by ``array_index``.
    """
    if count <= 0:
        return []
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in Job._meta.concrete_fields if f.name not in ("id", "array_index")]
    cols = ", ".join(columns)
    sql = (f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "
           f"INSERT INTO {quote(Job._meta.db_table)} ({cols}, {quote('array_index')}) "
           f"SELECT {', '.join('j.' + c for c in columns)}, n.i FROM {quote(Job._meta.db_table)} j, n "
           f"WHERE j.{quote('id')} = %s ORDER BY n.i RETURNING {quote('id')}, {quote('array_index')}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [count, job_id])
        rows = cursor.fetchall()
    return [pk for pk, _ in sorted(rows, key=lambda row: row[1])]


def _events_submitted(array: JobArray, *, detail: str) -> None:
    """The "submitted" event (seq 1) of every task of ``array``, in one ``INSERT ... SELECT``."""
    quote = connection.ops.quote_name
    job, event = quote(Job._meta.db_table), quote(JobEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {event} (job_id, seq, {quote('at')}, from_state, to_state, detail) "
            f"SELECT id, 1, submitted_at, '', state, %s FROM {job} WHERE array_id = %s",
            [detail[:500], array.pk])


def spec_submit(*, owner: AbstractBaseUser, document: Any,
                attachments: Mapping[str, Upload] | None = None) -> Job | ArraySubmitted:
    """Submit a spec document: an array when it has ``array`` (not null), else one job.

    Raises:
        SpecError: as :func:`array_submit` / :func:`apps.jobs.services.job_submit`.
    """
    if isinstance(document, Mapping) and document.get("array") is not None:
        return array_submit(owner=owner, document=document, attachments=attachments)
    return job_submit(owner=owner, document=document, attachments=attachments)


@dataclass(frozen=True)
class ArrayCancelled:
    """What :func:`array_cancel` did: queued tasks released, running tasks told to stop."""

    released: int
    stopping: int


def array_cancel(*, array: JobArray, by: AbstractBaseUser | None = None,
                 now: datetime | None = None) -> ArrayCancelled:
    """Cancel every task of ``array`` that is not released yet. Idempotent.

    Queued tasks are released ``cancelled`` at once, in a few statements however many
    (:func:`apps.jobs.state.transition_bulk`), nothing billed; tasks holding GPUs are cancelled
    one by one as :func:`apps.jobs.services.job_cancel` does (the agent stops them; the
    meter runs until the stop). No release e-mail is sent per queued task.

    Raises:
        PermissionDenied: ``by`` may see the array but not cancel it
            (:func:`apps.jobs.services.cancel.check_canceller`).
    """
    by_other = check_canceller(array, by)
    now = now or clock.now()
    with transaction.atomic():
        locked = JobArray.objects.select_for_update().get(pk=array.pk)
        if locked.cancel_requested_at is None:
            JobArray.objects.filter(pk=array.pk).update(cancel_requested_at=now)
            array.cancel_requested_at = now
        queued = list(Job.objects.filter(array=array, state=JobState.QUEUED).values_list("pk", flat=True))
        released = transition_bulk(queued, JobState.QUEUED, JobState.RELEASED,
                                   detail="cancelled with its array while queued" + by_other, now=now,
                                   outcome=Outcome.CANCELLED, end_reason=EndReason.CANCELLED,
                                   cancel_requested_at=now)
        stopping = 0
        # Tasks rented after the read above are in HOLDING by now (their row lock made us wait).
        for job in Job.objects.filter(array=array, state__in=HOLDING, cancel_requested_at__isnull=True):
            job_cancel(job=job, by=by, now=now)
            stopping += 1
        array_changed(array)
    return ArrayCancelled(len(released), stopping)


# --- reads -------------------------------------------------------------------
def arrays_of(user: Any) -> QuerySet[JobArray]:
    """The arrays ``user`` may see (theirs and their projects'), newest first. Anyone else's are
    simply not there."""
    if not user.is_authenticated:
        return JobArray.objects.none()
    return JobArray.objects.filter(shared_q(user)).order_by("-submitted_at", "-id")


def array_own_or_404(user: Any, pk: int) -> JobArray:
    """``user``'s job array ``pk``, for a page or an API call about one array.

    Raises:
        Http404: no such array, or one ``user`` may not see (answered as if it did not exist).
    """
    array = arrays_of(user).filter(pk=pk).first()
    if array is None:
        raise Http404
    return array


def jobs_grouped_of(user: Any) -> QuerySet[Job]:
    """The user's jobs for "My jobs": each array stands as its task 0 (a row for the array),
    other jobs as themselves; newest first. Paginate it like :func:`apps.jobs.selectors.jobs_of`."""
    return jobs_of(user).filter(Q(array__isnull=True) | Q(array_index=0))


STATE_ORDER = (JobState.QUEUED, JobState.RENTED, JobState.RUNNING, JobState.OUTPUT, JobState.RELEASED)


@dataclass
class ArrayCounts:
    """How many tasks of one array are in each state, and how the released ones ended."""

    by_state: dict[str, int]
    by_outcome: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def active(self) -> int:
        """Tasks not released yet (queued or holding GPUs)."""
        return self.total - self.by_state.get(JobState.RELEASED, 0)

    @property
    def state(self) -> str:
        """One word for the array as a whole: the earliest state any task is in
        (``released`` once all are)."""
        for state in STATE_ORDER:
            if self.by_state.get(state):
                return state
        return JobState.RELEASED

    def to_json(self) -> dict[str, Any]:
        """``{"queued": n, "rented": n, "running": n, "output": n, "released": n,
        "outcomes": {"succeeded": n, ...}}``: every state present, zero or not."""
        return {**{state.value: self.by_state.get(state, 0) for state in STATE_ORDER},
                "outcomes": dict(sorted(self.by_outcome.items()))}

    def parts(self) -> list[tuple[str, int]]:
        """Non-zero (label, count) pairs for a page: states in order, released split by outcome."""
        out = [(state.label.lower(), self.by_state[state]) for state in STATE_ORDER[:-1]
               if self.by_state.get(state)]
        out += [(Outcome(outcome).label.lower(), n) for outcome, n in sorted(self.by_outcome.items()) if n]
        return out


def array_counts(array_ids: Iterable[int]) -> dict[int, ArrayCounts]:
    """Counts by state and outcome of the tasks of each array, in one aggregate query."""
    ids = list(array_ids)
    out: dict[int, ArrayCounts] = {pk: ArrayCounts(defaultdict(int), defaultdict(int)) for pk in ids}
    if not ids:
        return out
    rows = (Job.objects.filter(array_id__in=ids).values("array_id", "state", "outcome")
            .annotate(n=Count("id")).order_by())
    for row in rows:
        counts = out[row["array_id"]]
        counts.by_state[row["state"]] += row["n"]
        if row["outcome"]:
            counts.by_outcome[row["outcome"]] += row["n"]
    return out


# --- live ----------------------------------------------------------------------
def array_changed(array: JobArray) -> None:
    """After commit: tell the owner's live pages that the array's row changed: one message
    naming task 0, whose row "My jobs" renders as the array's (:func:`apps.web.jobs.fragments.render_row`)."""
    first = Job.objects.filter(array=array, array_index=0).values_list("pk", flat=True).first()
    if first is not None:
        signals.job_changed.send(sender=Job, job_id=first, owner_id=array.owner_id)
