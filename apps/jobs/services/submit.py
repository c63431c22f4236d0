"""Writes to jobs: submit, cancel, and what agents report (SPEC §3).

Views, API, tasks and the agent endpoints call these; none of them changes
a job any other way.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.artifacts.models import Bundle, Upload
from apps.metering import billing
from apps.metering.limits import spend_limit_enforce
from apps.metering.models import Lease
from apps.metering.services import leases_end_lost, leases_release, leases_stop
from apps.metering.usage import usage_record
from apps.pool.models import Node
from apps.pool.notify import node_wake
from apps.pool.scheduling import job_request, pool_refusal

from . import live
from .choices import EndReason, JobState, Outcome
from .models import AgentReport, Job, JobEvent, LogChunk
from .spec import JobSpec, SpecError, parse_spec
from .state import TransitionError, event_add, transition

log = logging.getLogger(__name__)


class StaleAttempt(Exception):
    """A report about an attempt the server no longer runs on that node."""


def spec_validate(document: Any, *, owner: AbstractBaseUser,
                  attachments: Mapping[str, Upload] | None = None) -> JobSpec:
    """Validate a spec document fully: fields, uploads, file roots and the pool.

    ``upload:<name>`` naming one of ``attachments`` (files sent with the same
    submission) is rewritten to ``upload:<id>``; ``upload:<id>`` must be one
    of the owner's own uploads.

    Raises:
        SpecError: field errors, keyed by field path.
    """
    spec = parse_spec(document, time_limit_max_s=settings.E31_TIME_LIMIT_MAX_S,
                      retention_days_max=settings.E31_RETENTION_DAYS_MAX)
    errors: dict[str, list[str]] = {}
    attachments = attachments or {}
    for i, item in enumerate(spec.data):
        if item.source.startswith("upload:"):
            ref = item.source[len("upload:"):]
            if ref in attachments:
                item.source = attachments[ref].source
            elif not Upload.objects.filter(owner=owner, pk=_as_uuid(ref)).exists():
                errors[f"data[{i}].source"] = [f"No uploaded file named {ref!r}: attach it or upload it first."]
        elif item.source.startswith("file://") and not _file_allowed(item.source):
            errors[f"data[{i}].source"] = ["file:// is only allowed in directories the operator allows."]
    if not errors:
        request = job_request(_unsaved_job(spec, owner))
        refusal = pool_refusal(request)
        if refusal:
            errors["compute"] = [refusal[0].upper() + refusal[1:] + "."]
    if errors:
        raise SpecError(errors)
    return spec


def _as_uuid(ref: str) -> str | None:
    import uuid

    try:
        return str(uuid.UUID(ref))
    except ValueError:
        return None


def _file_allowed(url: str) -> bool:
    import os.path

    path = os.path.realpath(url[len("file://"):])
    return any(path == os.path.realpath(root) or path.startswith(os.path.realpath(root) + os.sep)
               for root in settings.E31_FILE_ROOTS)


def _unsaved_job(spec: JobSpec, owner: AbstractBaseUser) -> Job:
    return Job(owner=owner, name=spec.name, spec=spec.model_dump(mode="json"), kind=spec.work.kind,
               gpus_per_node=spec.compute.gpus, nodes=spec.compute.nodes,
               time_limit_s=spec.compute.time_limit_s, submitted_at=timezone.now())


def job_submit(*, owner: AbstractBaseUser, document: Any,
               attachments: Mapping[str, Upload] | None = None) -> Job:
    """Accept a job: validate, store it queued, ask for a scheduling cycle on commit.

    One short transaction and, after it, small messages (:func:`_after_submit`); the
    cycle runs elsewhere, and the job goes to rented in it if matching GPUs are free.

    Raises:
        SpecError: the spec is invalid, no known node could ever hold it, or its
            worst case exceeds what is left of the owner's monthly spend limit.
    """
    spec = spec_validate(document, owner=owner, attachments=attachments)
    if spec.output.retention_days is None:
        spec.output.retention_days = settings.E31_RETENTION_DAYS_DEFAULT
    with transaction.atomic():
        spend_limit_enforce(owner=owner, compute=spec.compute.model_dump(mode="json"))  # SpecError if over
        job = _unsaved_job(spec, owner)
        job.max_attempts = settings.E31_MAX_ATTEMPTS
        job.event_seq = 1  # the "submitted" event below; a new job has no other writer yet
        job.save()
        JobEvent.objects.create(job=job, seq=1, at=job.submitted_at, to_state=JobState.QUEUED, detail="submitted")
        _after_submit(owner.pk, [job.pk])
    return job


def _after_submit(owner_id: int, job_ids: list[int]) -> None:
    """The post-commit part of a submit (one job or many): call inside the submit's transaction.

    After commit: one small message to the owner's live pages (new rows), one to the pool
    page (more jobs waiting), and one ask for a scheduling cycle. Nothing is rendered and
    no cycle runs here (issue 10): the cycle runs in a Celery worker, or in the local
    loop of ``make run`` (:mod:`apps.pool.cycle_loop`).
    """
    from apps.pool.tasks import enqueue_schedule_cycle

    ids = list(job_ids)
    transaction.on_commit(lambda: live.jobs_changed(owner_id, ids), robust=True)
    live.pool_changed()
    enqueue_schedule_cycle()


class CancelEffect(StrEnum):
    """What a cancel did (the API says it, so a second cancel is not a silent 200)."""

    RELEASED = "released"  # it was queued: released at once, nothing billed
    STOPPING = "stopping"  # it held GPUs: the agent stops the run, billed up to the stop
    ALREADY_STOPPING = "already_stopping"  # a cancel was already asked; the stop is under way
    ALREADY_RELEASED = "already_released"  # nothing to do: it had ended


def job_cancel(*, job: Job, by: AbstractBaseUser | None = None) -> Job:
    """Cancel ``job``. Idempotent; see :func:`job_cancel_effect`."""
    return job_cancel_effect(job=job, by=by)[0]


@transaction.atomic
def job_cancel_effect(*, job: Job, by: AbstractBaseUser | None = None) -> tuple[Job, CancelEffect]:
    """Cancel ``job`` and say what that did. Idempotent.

    Queued: released at once with outcome ``cancelled``, nothing billed.
    Holding GPUs: the agent is told; it stops the process group (SIGTERM,
    SIGKILL after the grace period), packs what outputs exist and reports;
    the meter runs until the stop. A cancel is final: the job is never
    requeued after it, even if its node is lost (:func:`jobs_handle_node_loss`).
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state == JobState.RELEASED:
        return job, CancelEffect.ALREADY_RELEASED
    if job.cancel_requested_at:
        return job, CancelEffect.ALREADY_STOPPING
    now = timezone.now()
    if job.state == JobState.QUEUED:
        job = transition(job, JobState.RELEASED, detail="cancelled while queued", now=now,
                         outcome=Outcome.CANCELLED, end_reason=EndReason.CANCELLED, cancel_requested_at=now)
        return job, CancelEffect.RELEASED
    Job.objects.filter(pk=job.pk).update(cancel_requested_at=now)
    job.cancel_requested_at = now
    event_add(job, detail="cancel requested", at=now)
    for node_id in job.leases.filter(attempt=job.attempt, released_at__isnull=True).values_list("node_id", flat=True):
        node_wake(node_id)
    return job, CancelEffect.STOPPING


def _lease_for(node: Node, job_id: int, attempt: int) -> Lease:
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
        lease = _lease_for(node, job_id, attempt)
        job = Job.objects.select_for_update().get(pk=job_id)
        try:
            with transaction.atomic():
                AgentReport.objects.create(job=job, attempt=attempt, node_rank=lease.node_rank, seq=report["seq"],
                                           type=kind, received_at=now, payload=report)
        except IntegrityError:
            return False
        if lease.accepted_at is None and kind != "accepted":
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
        500 or 503 (not applied: send it again).
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
        answer.update(status=503, detail="not applied: an earlier report of this attempt failed")
        return answer, True
    try:
        applied = agent_report(node=node, job_id=job_id, report=report)  # its atomic() is a savepoint here
    except Job.DoesNotExist:
        answer.update(status=404, detail="no such job on this node")
    except StaleAttempt:
        answer.update(status=409, detail="stale attempt")
    except Exception:
        log.exception("report %s of job %s from node %s failed", report["seq"], job_id, node.name)
        answer.update(status=500, detail="server error; send it again")
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
    live.job_changed(job.pk, job.owner_id)  # staging progress on the job page, after commit


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
        message = str(report.get("message") or "")[:300]
        end = min(end, job.rented_at + timedelta(seconds=job.time_limit_s))
        transition(job, JobState.OUTPUT, detail=words + (f": {message}" if message else ""), now=end,
                   exit_code=exit_code, end_reason=reason, status_message="packing outputs")


# ``finished`` messages that mean declared outputs did not all come back (the agent's
# packer and uploader, SPEC §3): the job is then released ``failed`` with that reason.
LOST_OUTPUT = ("bundle upload failed", "packing outputs failed", "outputs not packed")


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
    _record_usage(job, now)


def _output_not_delivered(job: Job) -> str:
    """Why the declared outputs of the attempt did not come back, or "" when they did.

    A job that declares outputs and whose command ran must have a verified
    bundle from every rank; the agent's own word (its ``finished`` message)
    is the reason given when it has one. Whatever an agent says, a missing
    bundle is never a success (SPEC §3).
    """
    said = [r.payload.get("message", "") for r in job.agent_reports.filter(attempt=job.attempt, type="finished")]
    lost = next((m for m in said if m.startswith(LOST_OUTPUT)), "")
    if lost:  # the packer left files out, or packing or the upload failed
        return lost
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


def gang_stops_for(node: Node) -> list[dict[str, int]]:
    """Attempts of multi-node jobs that ``node`` must stop: the run ended on another rank (it
    failed, exited or was cancelled: the gang ends as one, SPEC §3), this node's agent has not
    reported its own ``exited`` yet. Shape: ``[{"job_id", "attempt"}]``, merged into the
    ``cancel`` list of the work and heartbeat answers.
    """
    stops = []
    for lease in Lease.objects.filter(node=node, released_at__isnull=True, run_ended_at__isnull=False,
                                      accepted_at__isnull=False, job__nodes__gt=1).select_related("job"):
        if lease.attempt != lease.job.attempt:
            continue
        if not AgentReport.objects.filter(job_id=lease.job_id, attempt=lease.attempt, node_rank=lease.node_rank,
                                          type__in=("exited", "finished")).exists():  # finished: folded exited
            stops.append({"job_id": lease.job_id, "attempt": lease.attempt})
    return stops


def _record_usage(job: Job, now: datetime) -> None:
    """Feed the account's fair-share usage and runtime history with a released job."""
    gpu_seconds = sum(lease.billed_seconds * lease.gpu_count for lease in
                      job.leases.filter(attempt=job.attempt, charged=True, billed_seconds__isnull=False))
    runtime = ((job.run_ended_at - job.run_started_at).total_seconds()
               if job.run_started_at and job.run_ended_at else None)
    usage_record(owner_id=job.owner_id, gpu_seconds=gpu_seconds, runtime_s=runtime, now=now)


_HANDLERS = {
    "accepted": _on_accepted,
    "staging": _on_staging,
    "running": _on_running,
    "exited": _on_exited,
    "finished": _on_finished,
}
REPORT_TYPES = tuple(_HANDLERS)


def log_append(*, node: Node, job_id: int, attempt: int, offset: int, data: bytes) -> int:
    """Store bytes of the attempt's log on this node's rank at ``offset``; bytes already stored
    are skipped.

    Returns the size of that rank's log now stored. Each rank's log is capped at
    ``E31_LOG_MAX_BYTES``; the first chunk past the cap is cut and a marker line appended.

    Raises:
        Job.DoesNotExist / StaleAttempt: as :func:`agent_report`.
    """
    with transaction.atomic():
        rank = _lease_for(node, job_id, attempt).node_rank
        job = Job.objects.select_for_update().get(pk=job_id)
        if rank == 0:
            size, cut = job.log_size, job.log_truncated
        else:
            last = LogChunk.objects.filter(job=job, attempt=attempt, node_rank=rank).order_by("-offset").first()
            size = last.offset + len(last.data) if last else 0
            cut = size > settings.E31_LOG_MAX_BYTES
        if cut or offset + len(data) <= size:
            return size
        if offset > size:
            raise ValueError(f"offset {offset} is past the {size} bytes stored")
        data = data[size - offset:]
        room = settings.E31_LOG_MAX_BYTES - size
        truncated = len(data) > room
        if truncated:
            data = data[:room] + b"\n[log cut: this job wrote more than the site keeps]\n"
        LogChunk.objects.create(job=job, attempt=attempt, node_rank=rank, offset=size, data=data)
        if rank == 0:  # the page's live tail is rank 0's
            Job.objects.filter(pk=job.pk).update(log_size=size + len(data), log_truncated=truncated)
            live.log_chunk_added(job.pk, attempt=attempt, offset=size, data=data, log_size=size + len(data))
        return size + len(data)


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


def jobs_handle_node_loss(*, node: Node, at: datetime, job_ids: set[int] | None = None) -> None:
    """Requeue (attempt + 1, same place) or release ``node_lost`` the jobs on a lost node.

    Leases end at ``at`` (the last heartbeat), recorded but not charged.
    ``job_ids`` limits it to those jobs (an agent that lost them, not the node).
    """
    for lease in leases_end_lost(node=node, at=at, job_ids=job_ids):
        job = Job.objects.select_for_update().get(pk=lease.job_id)
        if job.attempt != lease.attempt or job.state not in (JobState.RENTED, JobState.RUNNING, JobState.OUTPUT):
            continue
        # Other ranks of a multi-node job lose their partner: they end too, on
        # the platform's account (not charged), and their agents are told; their
        # GPUs stay fenced until those agents confirm the stop (SPEC §4).
        for other in job.leases.filter(attempt=job.attempt, released_at__isnull=True).select_related("node"):
            leases_end_lost(node=other.node, at=at, job_ids={job.pk}, fence=True)
            node_wake(other.node_id)
        try:
            if job.cancel_requested_at:  # a cancel is final: never requeued, never rented again
                transition(job, JobState.RELEASED, detail=f"node {node.name} lost after the cancel",
                           outcome=Outcome.CANCELLED, end_reason=EndReason.CANCELLED)
            elif job.attempt < job.max_attempts:
                transition(job, JobState.QUEUED, detail=f"node {node.name} lost; back in the queue",
                           attempt=job.attempt + 1, rented_at=None, run_started_at=None, run_ended_at=None,
                           exit_code=None, end_reason="", status_message="", log_size=0,
                           log_truncated=False, staging_bytes_done=0, staging_bytes_total=None)
            else:
                transition(job, JobState.RELEASED, detail=f"node {node.name} lost; no attempts left",
                           outcome=Outcome.NODE_LOST, end_reason=EndReason.NODE_LOST)
        except TransitionError:
            log.info("job %s moved while its node was lost", job.pk)


def jobs_reconcile_heartbeat(*, node: Node, running: list[dict[str, int]], min_age_s: float) -> int:
    """Treat as lost the accepted attempts that ``node``'s agent no longer lists as running.

    An agent restarted mid-job kills what its predecessor left and stops
    listing those attempts; the server then handles them like a node loss
    (requeued, not charged). Only leases accepted more than ``min_age_s``
    ago are considered, so a heartbeat sent just before an accept loses
    nothing. Returns how many jobs it handled.
    """
    listed = {(r["job_id"], r["attempt"]) for r in running}
    cutoff = timezone.now() - timedelta(seconds=min_age_s)
    lost = {lease.job_id for lease in Lease.objects.filter(
        node=node, released_at__isnull=True, accepted_at__lt=cutoff).select_related("job")
        if (lease.job_id, lease.attempt) not in listed and lease.attempt == lease.job.attempt}
    if lost:
        with transaction.atomic():
            log.warning("node %s no longer runs jobs %s: treating them as lost", node.name, sorted(lost))
            jobs_handle_node_loss(node=node, at=timezone.now(), job_ids=lost)
    return len(lost)


def jobs_enforce_time_limits(grace_s: int | None = None) -> int:
    """End, on the server's own authority, runs past ``rented_at + time_limit + grace``.

    For an agent cut off from the server: the meter stops at the limit and
    the job is released ``timed_out``; its GPUs stay fenced (held, unbilled) until
    the node's heartbeat no longer lists the attempt, or the node is declared down.
    Returns how many jobs it ended.
    """
    grace = settings.E31_GRACE_S + 30 if grace_s is None else grace_s
    now = timezone.now()
    ended = 0
    for job in Job.objects.filter(state__in=[JobState.RENTED, JobState.RUNNING]):
        limit = job.rented_at + timedelta(seconds=job.time_limit_s)
        if now < limit + timedelta(seconds=grace):
            continue
        with transaction.atomic():
            leases_stop(job=job, attempt=job.attempt, end=limit, reason=EndReason.TIME_LIMIT)
            try:
                transition(job, JobState.OUTPUT, detail="time limit passed with no word from the agent",
                           now=limit, end_reason=EndReason.TIME_LIMIT)
                # fenced: the GPUs go to no other job until the node confirms the stop or is down
                leases_release(job=job, attempt=job.attempt, now=now, fence=True)
                transition(job, JobState.RELEASED, detail="released: timed out (server)", now=now,
                           outcome=Outcome.TIMED_OUT)
                _record_usage(job, now)
            except TransitionError:
                continue
            for lease in job.leases.filter(attempt=job.attempt):
                node_wake(lease.node_id)
        ended += 1
    return ended
