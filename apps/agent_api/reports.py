"""The agents' report protocol (docs/agent-protocol.md): what an agent says about a job it runs,
applied to the job, its leases and its log. The endpoints (:mod:`apps.agent_api.api.views`) call
these; the job changes only through :mod:`apps.jobs.state`.
"""
from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from e31_protocol import LOST_OUTPUT, ErrorCode, ReportType, finish_code

from apps.agent_api.models import AgentReport
from apps.artifacts.models import Bundle
from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs import signals
from apps.jobs.models import Job
from apps.jobs.services.logs import log_append
from apps.jobs.services.usage import job_usage_record
from apps.jobs.sources import source_words
from apps.jobs.state import transition
from apps.metering import billing
from apps.metering.models import Lease
from apps.metering.services import leases_release, leases_stop
from apps.pool.models import Node
from apps.pool.notify import node_wake

log = logging.getLogger(__name__)


class StaleAttempt(Exception):
    """A report about an attempt the server no longer runs on that node."""


def lease_for(node: Node, job_id: int, attempt: int) -> Lease:
    """``node``'s lease of attempt ``attempt`` of job ``job_id``.

    Raises:
        Job.DoesNotExist: the job has no lease of that attempt on this node (answered 404).
        StaleAttempt: the lease or the attempt is over (answered 409).
    """
    lease = (Lease.objects.select_related("job").filter(node=node, job_id=job_id, attempt=attempt)
             .first())
    if lease is None:
        raise Job.DoesNotExist
    if lease.released_at is not None or lease.job.attempt != attempt:
        raise StaleAttempt
    return lease


def agent_report(*, node: Node, job_id: int, report: dict[str, Any], now: datetime | None = None) -> bool:
    """Apply one report of an agent about a job it runs (docs/agent-protocol.md); ``now`` is its
    arrival on the server's clock (default: now; tests give a frozen one).

    Returns:
        False when this (job, attempt, seq) was applied before: nothing changes.

    Raises:
        Job.DoesNotExist: the job has no lease on this node (answered 404).
        StaleAttempt: the attempt is over on this node (answered 409).
    """
    attempt, kind = report["attempt"], report["type"]
    now = now or timezone.now()
    with transaction.atomic():
        lease = lease_for(node, job_id, attempt)
        job = Job.objects.select_for_update().get(pk=job_id)
        try:
            with transaction.atomic():
                AgentReport.objects.create(job=job, attempt=attempt, node_rank=lease.node_rank, seq=report["seq"],
                                           type=kind, received_at=now, payload=report)
        except IntegrityError:
            return False
        if lease.accepted_at is None and kind != ReportType.ACCEPTED:
            # Folded: an agent that stages nothing sends ``running`` without ``accepted`` before it
            # (protocol v2); any report of the attempt means it was taken.
            _on_accepted(job, lease, report, now)
        handler = _HANDLERS[kind]
        handler(job, lease, report, now)
    return True


def agent_reports_apply(*, node: Node, reports: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Apply a batch of reports (``POST /api/v1/agent/reports/``): ``(job_id, report)`` pairs,
    each report as for :func:`agent_report`, several jobs' reports in one call.

    One transaction for the batch, so the pushes after commit (live pages, the scheduling cycle
    a release asks for) go once per batch, not once per report; each report in a savepoint of
    its own, so one that fails undoes no other. Each report is applied once (deduplicated by
    (job, attempt, rank, seq)); each attempt's reports in seq order, whatever their order in the
    batch; attempts by job id (one lock order for every batch). A report that fails with an
    unexpected error stops the later reports of its attempt in this batch (answered 503, not
    applied), so the agent sends them again, in order, with it. Should the commit itself fail,
    the call fails (5xx) and the agent sends the whole batch again.

    Returns:
        One answer per report, in the order given: ``{"job_id", "seq", "status", ...}`` with
        ``status`` 200 (and ``duplicate``), 404 (no lease on this node), 409 (``stale attempt``),
        500 or 503 (not applied: send it again); each refusal with a ``code``
        (:class:`e31_protocol.ErrorCode`: ``not_on_node``, ``stale_attempt``, ``server_error``,
        ``not_applied``) beside its ``detail``.
    """
    answers: list[dict[str, Any] | None] = [None] * len(reports)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (job_id, report) in enumerate(reports):
        groups.setdefault((job_id, report["attempt"]), []).append(i)
    with transaction.atomic():
        for (job_id, _attempt), indexes in sorted(groups.items()):
            failed = False
            for i in sorted(indexes, key=lambda i: reports[i][1]["seq"]):
                answers[i], failed = _apply_one(node, job_id, reports[i][1], failed)
    return [a for a in answers if a is not None]


def _apply_one(node: Node, job_id: int, report: dict[str, Any], held_back: bool) -> tuple[dict[str, Any], bool]:
    """One report of a batch in a savepoint: ``(answer, failed)``."""
    answer: dict[str, Any] = {"job_id": job_id, "seq": report["seq"]}
    if held_back:
        answer.update(status=503, detail="not applied: an earlier report of this attempt failed",
                      code=ErrorCode.NOT_APPLIED.value)
        return answer, True
    try:
        applied = agent_report(node=node, job_id=job_id, report=report)  # its atomic() is a savepoint here
    except Job.DoesNotExist:
        answer.update(status=404, detail="no such job on this node", code=ErrorCode.NOT_ON_NODE.value)
    except StaleAttempt:
        answer.update(status=409, detail="stale attempt", code=ErrorCode.STALE_ATTEMPT.value)
    except Exception:
        log.exception("report %s of job %s from node %s failed", report["seq"], job_id, node.name)
        answer.update(status=500, detail="server error; send it again", code=ErrorCode.SERVER_ERROR.value)
        return answer, True
    else:
        answer.update(status=200, duplicate=not applied)
    return answer, False


def _on_accepted(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    Lease.objects.filter(pk=lease.pk, accepted_at__isnull=True).update(accepted_at=now)
    lease.accepted_at = lease.accepted_at or now


def _on_staging(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    done = max(0, int(report.get("bytes_done") or 0))
    rate = job.staging_rate_bps
    if job.staging_updated_at and done > job.staging_bytes_done:
        elapsed = (now - job.staging_updated_at).total_seconds()
        rate = (done - job.staging_bytes_done) / elapsed if elapsed > 0 else rate
    Job.objects.filter(pk=job.pk).update(
        staging_bytes_done=done, staging_bytes_total=report.get("bytes_total"), staging_rate_bps=rate,
        staging_updated_at=now, status_message=str(report.get("message") or "staging inputs")[:500])
    # An older agent sends no bytes_fetched: then every byte counts as downloaded.
    fetched = report.get("bytes_fetched", done if "bytes_cached" not in report else 0)
    if fetched:
        _staging_seconds_set(lease, now)
    signals.job_changed.send(sender=Job, job_id=job.pk, owner_id=job.owner_id)  # staging progress on the page


def _staging_seconds_set(lease: Lease, now: datetime) -> None:
    """``Lease.staging_seconds``: whole seconds (ceil, server clock) from the accept to ``now``,
    for a lease that downloaded inputs on the meter; capped by the time limit. Pre-staged inputs
    (all in the node's cache at rent) leave it 0."""
    start = lease.accepted_at or lease.rented_at
    seconds = min(lease.time_limit_s, max(1, math.ceil((now - start).total_seconds())))
    Lease.objects.filter(pk=lease.pk).update(staging_seconds=seconds)
    lease.staging_seconds = seconds


def _reported_at(lease: Lease, report: dict, now: datetime, *, heartbeats: bool) -> datetime:
    """When what ``report`` says happened, by the evidence the server saw (SPEC §4, one clock):
    its arrival ``now``, bounded by ``rented_at`` plus the agent's measured ``elapsed_s`` and, for
    a run's end (``heartbeats``), by the last heartbeat that listed the run plus one interval."""
    return billing.evidenced_end(rented_at=lease.rented_at, arrived_at=now,
                                 seen_at=lease.seen_at if heartbeats else None,
                                 heartbeat_s=settings.E31_HEARTBEAT_S, measured_s=report.get("elapsed_s"))


def _on_running(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    start = _reported_at(lease, report, now, heartbeats=False)
    if lease.staging_seconds:  # it downloaded inputs: staging lasted until the start
        _staging_seconds_set(lease, start)
    if job.state == JobState.RENTED:  # one rank of a multi-node job is enough
        transition(job, JobState.RUNNING, detail=f"command started on {lease.node.name}", now=start,
                   status_message="running")


def _on_exited(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    reason = report.get("reason") or EndReason.EXIT
    exit_code = report.get("exit_code")
    # The run ended when the evidence says, not when the report got through (an outage, a
    # report buffered on the agent's disk): SPEC §4, one clock.
    end = _reported_at(lease, report, now, heartbeats=True)
    if job.run_started_at is not None and lease.rented_at <= job.run_started_at <= now:
        end = max(end, job.run_started_at)  # never ends before it started
    leases_stop(job=job, attempt=job.attempt, end=end, reason=reason)
    for other in job.leases.filter(attempt=job.attempt, released_at__isnull=True).exclude(pk=lease.pk):
        node_wake(other.node_id)  # a gang ends as one: the other ranks are told to stop (gang_stops_for)
    if job.state in (JobState.RENTED, JobState.RUNNING):
        if job.cancel_requested_at and reason == EndReason.EXIT:
            reason = EndReason.CANCELLED
        words = {
            EndReason.EXIT: f"command exited with code {exit_code}",
            EndReason.TIME_LIMIT: "stopped at the time limit",
            EndReason.CANCELLED: "stopped: cancelled",
            EndReason.STAGING_FAILED: "staging failed",
            EndReason.START_FAILED: "command could not start",
        }.get(reason, reason)
        message = source_words(job, str(report.get("message") or ""))[:300]
        end = min(end, job.rented_at + timedelta(seconds=job.time_limit_s))
        transition(job, JobState.OUTPUT, detail=words + (f": {message}" if message else ""), now=end,
                   exit_code=exit_code, end_reason=reason, status_message="packing outputs")


def _on_finished(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    if report.get("exited") is not None:
        # Folded (protocol v2, nothing declared as output): the ``exited`` it stands for comes
        # first, at the same server time, exactly as if it had been sent on its own.
        _on_exited(job, lease, report["exited"], now)
    elif job.state == JobState.RUNNING or job.state == JobState.RENTED:
        # finished without exited (agent bug or older agent): stop the meter now
        _on_exited(job, lease, {"reason": EndReason.EXIT, "exit_code": report.get("exit_code")}, now)
    if job.nodes > 1 and not _every_rank_finished(job):
        return  # the other ranks are still packing and uploading their bundles
    leases_release(job=job, attempt=job.attempt, now=now)
    if job.state != JobState.OUTPUT:
        return
    # Multi-node: the job is released once every rank's lease is released.
    if job.leases.filter(attempt=job.attempt, released_at__isnull=True).exists():
        return
    outcome = {
        EndReason.TIME_LIMIT: Outcome.TIMED_OUT,
        EndReason.CANCELLED: Outcome.CANCELLED,
    }.get(job.end_reason)
    if outcome is None:
        outcome = Outcome.SUCCEEDED if job.exit_code == 0 and job.end_reason == EndReason.EXIT else Outcome.FAILED
    lost_output = _output_not_delivered(job)
    if lost_output and outcome == Outcome.SUCCEEDED:
        outcome = Outcome.FAILED  # the command worked but its declared outputs did not come back
    transition(job, JobState.RELEASED, detail=f"released: {outcome.label.lower()}"
               + (f" ({lost_output[:200]})" if lost_output else ""), now=now,
               outcome=outcome, status_message=lost_output[:500])
    job_usage_record(job, now)


def _output_not_delivered(job: Job) -> str:
    """Why the declared outputs of the attempt did not come back, or "" when they did.

    A job that declares outputs and whose command ran must have a verified
    bundle from every rank; the agent's own word (its ``finished`` message)
    is the reason given when it has one. Whatever an agent says, a missing
    bundle is never a success (SPEC §3).

    The agent's word is its ``finished`` report's ``code`` (:data:`e31_protocol.LOST_OUTPUT`:
    ``bundle_upload_failed``, ``packing_failed``, ``outputs_not_packed``), never the wording of
    its message; a protocol v2 agent sends no code, and :func:`e31_protocol.finish_code` reads
    its message's fixed prefix instead (for that one version).
    """
    finished = [r.payload for r in job.agent_reports.filter(attempt=job.attempt, type=ReportType.FINISHED)]
    said = [p.get("message", "") for p in finished]
    lost = next((p for p in finished if finish_code(p) in LOST_OUTPUT), None)
    if lost is not None:  # the packer left files out, or packing or the upload failed
        return lost.get("message") or f"output not delivered ({finish_code(lost)})"
    if not (job.spec.get("output") or {}).get("paths") or job.run_started_at is None:
        return ""
    delivered = Bundle.objects.filter(job=job, attempt=job.attempt, completed_at__isnull=False).count()
    if delivered >= job.nodes:
        return ""
    return next((m for m in said if m), "output not delivered: no verified bundle was received")


def _every_rank_finished(job: Job) -> bool:
    """True once every rank of the attempt sent ``finished`` (or its lease ended otherwise)."""
    open_ranks = set(job.leases.filter(attempt=job.attempt, released_at__isnull=True).values_list("node_rank",
                                                                                                 flat=True))
    done = set(job.agent_reports.filter(attempt=job.attempt, type="finished").values_list("node_rank", flat=True))
    return open_ranks <= done


_HANDLERS = {
    ReportType.ACCEPTED: _on_accepted,
    ReportType.STAGING: _on_staging,
    ReportType.RUNNING: _on_running,
    ReportType.EXITED: _on_exited,
    ReportType.FINISHED: _on_finished,
}


def agent_log_append(*, node: Node, job_id: int, attempt: int, offset: int, data: bytes,
                     stream: str = "combined", at: datetime | None = None) -> int:
    """Store log bytes ``node``'s agent sent for its rank of the attempt at byte ``offset``
    (:func:`apps.jobs.services.logs.log_append`; bytes already stored are skipped).

    Returns the size of that rank's log now stored (bytes).

    Raises:
        Job.DoesNotExist / StaleAttempt: as :func:`agent_report`.
        ValueError: ``offset`` is past the bytes stored.
    """
    with transaction.atomic():
        rank = lease_for(node, job_id, attempt).node_rank
        return log_append(job_id=job_id, attempt=attempt, rank=rank, offset=offset, data=data,
                          stream=stream, at=at)
