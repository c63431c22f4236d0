"""The one path through which a job changes state (SPEC §3).

No other code assigns ``job.state``. :func:`transition` checks the move,
stamps the time from the server's clock, writes the timeline event and,
tells whoever listens through :mod:`apps.jobs.signals` (live pages, notices), whose
receivers act after the commit.
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F
from e31_protocol.redact import redact_text

from apps.core import clock
from apps.core.choices import ALLOWED_MOVES, STAMP_FIELD, JobState
from apps.core.observe import observe
from apps.pool import signals as pool_signals
from apps.scheduling.tasks import enqueue_schedule_cycle

from . import signals
from .models import Job, JobEvent
from .reasons import end_words, needs_reason


class TransitionError(Exception):
    """The move is not allowed, or another process moved the job first."""


def event_add(job: Job, *, detail: str, from_state: str = "", to_state: str = "",
              at: datetime | None = None) -> JobEvent:
    """Append one event to ``job``'s timeline and bump its version.

    The ``event_seq`` increment is an UPDATE ... SET seq = seq + 1 so two
    processes adding events at once never take the same seq. Sends
    :data:`~apps.jobs.signals.job_changed` (the live pages push it after commit, once per transaction).
    """
    at = at or clock.now()
    Job.objects.filter(pk=job.pk).update(event_seq=F("event_seq") + 1)
    job.event_seq = Job.objects.values_list("event_seq", flat=True).get(pk=job.pk)
    signals.job_changed.send(sender=Job, job_id=job.pk, owner_id=job.owner_id)
    return JobEvent.objects.create(job=job, seq=job.event_seq, at=at, from_state=from_state,
                                   to_state=to_state, detail=redact_text(detail)[:500])


@transaction.atomic
def _moved_values(to: str, now: datetime, fields: dict[str, object]) -> dict[str, object]:
    """The columns a move to ``to`` writes: the state, its time stamp, ``fields``; a job that
    leaves the queue loses its queue position, estimate and reason."""
    values: dict[str, object] = {"state": to, **fields}
    stamp = STAMP_FIELD.get(to)
    if stamp:
        values[stamp] = now
    if to != JobState.QUEUED:
        values.update(queue_position=None, estimated_start_at=None, latest_start_at=None, pending_reason="")
    if to == JobState.RELEASED:
        # Progress words ("running", "packing outputs") are stale once the GPUs are back; a
        # release that has something to say (lost output) passes its own status_message.
        values.setdefault("status_message", "")
    return values


def transition(job: Job, to: str, *, detail: str = "", now: datetime | None = None,
               **fields: object) -> Job:
    """Move ``job`` from its current state to ``to``.

    Args:
        job: the job as last read; its ``state`` is the expected current state.
        to: a :class:`JobState` value allowed from the current state.
        detail: plain words for the timeline.
        now: the server time to stamp (defaults to now); never an agent's clock.
        fields: other columns to set in the same UPDATE (outcome, exit_code...).

    Returns:
        ``job``, updated in place.

    Raises:
        TransitionError: the move is not in ``ALLOWED_MOVES``, or the row was
            no longer in the expected state (another process won the race).
    """
    src = job.state
    if to not in ALLOWED_MOVES[src]:
        raise TransitionError(f"job {job.pk}: {src} -> {to} is not allowed")
    now = now or clock.now()
    outcome = fields.get("outcome", job.outcome)
    if to == JobState.RELEASED and not fields.get("status_message") and needs_reason(outcome):
        # The release's reason, in the job page's words: the API, CLI, e-mails and webhooks read it here
        # (a release with its own words, such as a lost output, keeps them).
        fields["status_message"] = end_words(job, released_from=src, release_detail=detail)[:500]
    if isinstance(fields.get("status_message"), str):
        fields["status_message"] = redact_text(fields["status_message"])  # shown on the job page and API
    values = _moved_values(to, now, fields)
    # Conditional UPDATE: closes the race of two processes moving the same
    # job (say an agent's "exited" and the node watchdog) from one state.
    if Job.objects.filter(pk=job.pk, state=src).update(**values) != 1:
        raise TransitionError(f"job {job.pk} is no longer {src}")
    for key, value in values.items():
        setattr(job, key, value)
    event_add(job, detail=detail, from_state=src, to_state=to, at=now)
    if to == JobState.RUNNING and job.attempt == 1:  # submit to first running: /metrics' start latency
        waited_s = (now - job.submitted_at).total_seconds()
        transaction.on_commit(lambda: observe("start", waited_s))
    if JobState.QUEUED in (src, to) or to == JobState.RELEASED:
        pool_signals.pool_changed.send(sender=Job)  # GPUs taken or given back, or the queue length changed
    if to in (JobState.QUEUED, JobState.RELEASED):
        # A job joins the queue or GPUs come back: the plan may change (asked after commit).
        enqueue_schedule_cycle()
    if to == JobState.RELEASED:
        signals.job_released.send(sender=Job, job_id=job.pk)  # the owner's e-mail, after commit
    return job


@transaction.atomic
def transition_bulk(job_ids: list[int], src: str, to: str, *, detail: str = "", now: datetime | None = None,
                    **fields: object) -> list[int]:
    """Move every job of ``job_ids`` still in ``src`` to ``to`` in a few statements, not one per job.

    The same rules as :func:`transition` (allowed move, stamp, queue fields cleared, one
    event each, version bumped), for the many queued tasks of a job array cancelled at once.
    Jobs no longer in ``src`` are skipped, not errors.

    Returns:
        The ids moved.

    Raises:
        TransitionError: ``src -> to`` is not an allowed move.
    """
    if to not in ALLOWED_MOVES[src]:
        raise TransitionError(f"{src} -> {to} is not allowed")
    now = now or clock.now()
    # Locked rows in ``src``: closes the race with a scheduling cycle renting one of them
    # (or an agent moving it) between this read and the UPDATE below.
    rows = list(Job.objects.select_for_update().filter(pk__in=job_ids, state=src)
                .order_by("pk").values_list("pk", "event_seq"))
    if not rows:
        return []
    ids = [pk for pk, _ in rows]
    if to == JobState.RELEASED and src != JobState.OUTPUT and not fields.get("status_message") \
            and needs_reason(str(fields.get("outcome", ""))):
        fields["status_message"] = redact_text(detail)[:500]  # the release's reason, as transition() writes it
    values = _moved_values(to, now, fields)
    Job.objects.filter(pk__in=ids).update(event_seq=F("event_seq") + 1, **values)
    JobEvent.objects.bulk_create([JobEvent(job_id=pk, seq=seq + 1, at=now, from_state=src, to_state=to,
                                           detail=detail[:500]) for pk, seq in rows], batch_size=2000)
    pool_signals.pool_changed.send(sender=Job)
    if to in (JobState.QUEUED, JobState.RELEASED):
        enqueue_schedule_cycle()  # one cycle for all of them
    return ids
