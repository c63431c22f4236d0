"""The one owner of an attempt (SPEC §3, §4), from the agent's accept to the release: what each
step of the run means for the job and its leases, whether every rank finished, whether the
declared output came back, the outcome, and what a heartbeat says about the attempts on a node.

The agent protocol (:mod:`apps.agent_api.reports`) parses, deduplicates and orders the agents'
reports and calls these with plain values; no decision about an attempt is taken there. The job
moves only through :mod:`apps.jobs.state`, the lease only through :mod:`apps.metering.lease`.
Every ``now`` is the server's clock (a report's arrival); never an agent's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from apps.artifacts.models import Bundle
from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs import signals
from apps.jobs.models import Job
from apps.jobs.services.recovery import jobs_reconcile_heartbeat
from apps.jobs.services.retries import attempt_release
from apps.jobs.sources import source_words
from apps.jobs.state import transition
from apps.metering import billing
from apps.metering.lease import (
    fences_confirm,
    lease_accept,
    lease_staging_seconds_set,
    leases_release,
    leases_seen,
    leases_stop,
)
from apps.metering.models import Lease
from apps.pool.models import Node
from apps.pool.notify import node_wake
from apps.pool.services import node_heartbeat
from apps.scheduling.node_cache import node_cache_report

# The timeline's words for each way a run ends.
END_WORDS = {
    EndReason.EXIT: "command exited with code {exit_code}",
    EndReason.TIME_LIMIT: "stopped at the time limit",
    EndReason.CANCELLED: "stopped: cancelled",
    EndReason.STAGING_FAILED: "staging failed",
    EndReason.START_FAILED: "command could not start",
}


@dataclass(frozen=True)
class RankFinished:
    """One rank's ``finished`` word for the attempt: its rank, its code (one of
    :data:`e31_protocol.LOST_OUTPUT` when its output did not go out, else "") and its message."""

    rank: int
    code: str = ""
    message: str = ""


def attempt_accept(*, job: Job, lease: Lease, now: datetime) -> None:
    """The agent took the attempt at ``now`` (``accepted``, or the first report of an agent that
    stages nothing): the lease is ``held`` from then on."""
    lease_accept(lease=lease, now=now)


def attempt_staging(*, job: Job, lease: Lease, bytes_done: int, bytes_total: int | None, bytes_fetched: int,
                    message: str, now: datetime) -> None:
    """Staging progress at ``now``: ``bytes_done`` of ``bytes_total`` inputs in place (bytes), of
    which ``bytes_fetched`` were downloaded on the meter (not from the node's cache). The rate
    (bytes/s) is from the bytes gained since the last progress; a lease that downloaded anything
    counts its staging seconds (:func:`apps.metering.lease.lease_staging_seconds_set`)."""
    done = max(0, bytes_done)
    rate = job.staging_rate_bps
    if job.staging_updated_at and done > job.staging_bytes_done:
        elapsed = (now - job.staging_updated_at).total_seconds()
        rate = (done - job.staging_bytes_done) / elapsed if elapsed > 0 else rate
    Job.objects.filter(pk=job.pk).update(
        staging_bytes_done=done, staging_bytes_total=bytes_total, staging_rate_bps=rate,
        staging_updated_at=now, status_message=(message or "staging inputs")[:500])
    if bytes_fetched:
        lease_staging_seconds_set(lease=lease, now=now)
    signals.job_changed.send(sender=Job, job_id=job.pk, owner_id=job.owner_id)  # staging progress on the page


def _evidenced(lease: Lease, now: datetime, elapsed_s: float | None, *, heartbeats: bool) -> datetime:
    """When what a report says happened, by the evidence the server saw (SPEC §4, one clock): its
    arrival ``now``, bounded by ``rented_at`` plus the agent's measured ``elapsed_s`` and, for a
    run's end (``heartbeats``), by the last heartbeat that listed the run plus one interval."""
    return billing.evidenced_end(rented_at=lease.rented_at, arrived_at=now,
                                 seen_at=lease.seen_at if heartbeats else None,
                                 heartbeat_s=settings.E31_HEARTBEAT_S, measured_s=elapsed_s)


def attempt_running(*, job: Job, lease: Lease, elapsed_s: float | None, now: datetime) -> None:
    """The command started (``running``, arrived at ``now``; ``elapsed_s``: the agent's measured
    seconds since its rent). One rank of a multi-node job is enough to move the job to running."""
    start = _evidenced(lease, now, elapsed_s, heartbeats=False)
    if lease.staging_seconds:  # it downloaded inputs: staging lasted until the start
        lease_staging_seconds_set(lease=lease, now=start)
    if job.state == JobState.RENTED:
        transition(job, JobState.RUNNING, detail=f"command started on {lease.node.name}", now=start,
                   status_message="running")


def attempt_exited(*, job: Job, lease: Lease, reason: str, exit_code: int | None, message: str,
                   elapsed_s: float | None, now: datetime) -> None:
    """The run ended (``exited``, arrived at ``now``): the meter of every rank stops at the evidenced
    end (never before the start, at most the time limit), the other ranks of a gang are told to
    stop (the gang ends as one), and the job moves to output with its end reason and exit code.

    ``reason``: an :class:`EndReason` value; a plain exit after a cancel request counts as cancelled.
    """
    reason = reason or EndReason.EXIT
    # The run ended when the evidence says, not when the report got through (an outage, a
    # report buffered on the agent's disk): SPEC §4, one clock.
    end = _evidenced(lease, now, elapsed_s, heartbeats=True)
    if job.run_started_at is not None and lease.rented_at <= job.run_started_at <= now:
        end = max(end, job.run_started_at)  # never ends before it started
    leases_stop(job=job, attempt=job.attempt, end=end, reason=reason)
    for other in job.leases.filter(attempt=job.attempt, released_at__isnull=True).exclude(pk=lease.pk):
        node_wake(other.node_id)  # a gang ends as one: the other ranks are told to stop (gang_stops_for)
    if job.state not in (JobState.RENTED, JobState.RUNNING):
        return
    if job.cancel_requested_at and reason == EndReason.EXIT:
        reason = EndReason.CANCELLED
    words = END_WORDS.get(reason, reason).format(exit_code=exit_code)
    said = source_words(job, message)[:300]
    end = min(end, job.rented_at + timedelta(seconds=job.time_limit_s))
    transition(job, JobState.OUTPUT, detail=words + (f": {said}" if said else ""), now=end,
               exit_code=exit_code, end_reason=reason, status_message="packing outputs")


def attempt_finished(*, job: Job, lease: Lease, exit_code: int | None, finished: Sequence[RankFinished],
                     now: datetime) -> None:
    """A rank is done with the attempt (``finished``, arrived at ``now``): once every rank is, the
    leases are released and the job with its outcome (:func:`attempt_outcome`), or it is retried
    (:func:`apps.jobs.services.retries.attempt_release`).

    ``finished``: every ``finished`` word of the attempt so far, this one included. A rank that
    finished without an ``exited`` before it (an older agent) stops the meter now, as an exit with
    ``exit_code``; a folded ``exited`` the caller applies first (:func:`attempt_exited`).
    """
    if job.state in (JobState.RENTED, JobState.RUNNING):
        attempt_exited(job=job, lease=lease, reason=EndReason.EXIT, exit_code=exit_code, message="",
                       elapsed_s=None, now=now)
    if job.nodes > 1 and not attempt_every_rank_finished(job=job, finished=finished):
        return  # the other ranks are still packing and uploading their bundles
    leases_release(job=job, attempt=job.attempt, now=now)
    if job.state != JobState.OUTPUT:
        return
    if job.leases.filter(attempt=job.attempt, released_at__isnull=True).exists():
        return  # multi-node: the job is released once every rank's lease is
    outcome, lost = attempt_outcome(job=job, finished=finished)
    attempt_release(job, outcome=outcome, detail=f"released: {outcome.label.lower()}"
                    + (f" ({lost[:200]})" if lost else ""), now=now, status_message=lost[:500])


def attempt_every_rank_finished(*, job: Job, finished: Sequence[RankFinished]) -> bool:
    """True once every rank of the attempt whose lease is open said ``finished``."""
    open_ranks = set(job.leases.filter(attempt=job.attempt, released_at__isnull=True)
                     .values_list("node_rank", flat=True))
    return open_ranks <= {f.rank for f in finished}


def attempt_outcome(*, job: Job, finished: Sequence[RankFinished]) -> tuple[Outcome, str]:
    """The outcome of the ended attempt and, when its declared output did not come back, why
    (:func:`attempt_output_not_delivered`; "" otherwise). A time limit is ``timed_out``, a cancel
    ``cancelled``; an exit 0 ``succeeded`` unless its output was lost (SPEC §3), else ``failed``."""
    outcome = {EndReason.TIME_LIMIT: Outcome.TIMED_OUT, EndReason.CANCELLED: Outcome.CANCELLED}.get(job.end_reason)
    if outcome is None:
        outcome = Outcome.SUCCEEDED if job.exit_code == 0 and job.end_reason == EndReason.EXIT else Outcome.FAILED
    lost = attempt_output_not_delivered(job=job, finished=finished)
    if lost and outcome == Outcome.SUCCEEDED:
        outcome = Outcome.FAILED  # the command worked but its declared outputs did not come back
    return outcome, lost


def attempt_output_not_delivered(*, job: Job, finished: Sequence[RankFinished]) -> str:
    """Why the declared outputs of the attempt did not come back, or "" when they did.

    A job that declares outputs and whose command ran must have a verified bundle from every rank;
    the agent's own word (a ``finished`` whose code says the output was lost) is the reason given
    when it has one. Whatever an agent says, a missing bundle is never a success (SPEC §3).
    """
    lost = next((f for f in finished if f.code), None)
    if lost is not None:  # the packer left files out, or packing or the upload failed
        return lost.message or f"output not delivered ({lost.code})"
    if not (job.spec.get("output") or {}).get("paths") or job.run_started_at is None:
        return ""
    delivered = Bundle.objects.filter(job=job, attempt=job.attempt, completed_at__isnull=False).count()
    if delivered >= job.nodes:
        return ""
    return next((f.message for f in finished if f.message), "output not delivered: no verified bundle was received")


def attempts_heartbeat(*, node: Node, health: dict[str, Any] | None, cached_inputs: list[Any] | None,
                       running: list[dict[str, int]] | None, now: datetime) -> Node:
    """A heartbeat of ``node`` at ``now``: stamp it (with its GPU health), keep its input cache
    report, and reconcile the attempts it lists as ``running`` (``[{"job_id", "attempt"}]``;
    None: an agent that does not say, nothing reconciled):

    - the listed runs' leases are seen now (the evidence that bounds their end);
    - accepted attempts no longer listed (after two intervals) are lost, as with a node loss;
    - fences of attempts no longer listed (after one interval) are lifted.

    Returns the node as it stands after the beat (its state).
    """
    node_heartbeat(node=node, health=health, now=now)
    if cached_inputs is not None:  # issue 14 item 5; older agents send none
        node_cache_report(node_id=node.pk, inputs=cached_inputs)
    if running is not None:
        leases_seen(node=node, running=running, now=now)
        jobs_reconcile_heartbeat(node=node, running=running, min_age_s=2 * settings.E31_HEARTBEAT_S)
        listed = {(r["job_id"], r["attempt"]) for r in running}
        fences_confirm(node=node, listed=listed, min_age_s=settings.E31_HEARTBEAT_S, now=now)
    return Node.objects.get(pk=node.pk)
