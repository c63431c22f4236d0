"""The agents' report protocol (docs/agent-protocol.md), the wire only: a report is parsed,
deduplicated (job, attempt, rank, seq), put in order and handed, as plain values, to the attempt's
owner (:mod:`apps.jobs.services.attempts`), which takes every decision about the job and its leases.
The endpoints (:mod:`apps.agent_api.api.views`) call these.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from e31_protocol import LOST_OUTPUT, ErrorCode, ReportType, finish_code

from apps.agent_api.models import AgentReport
from apps.core import clock
from apps.core.choices import EndReason
from apps.jobs.models import Job
from apps.jobs.services.attempts import (
    RankFinished,
    attempt_accept,
    attempt_exited,
    attempt_finished,
    attempt_running,
    attempt_staging,
)
from apps.jobs.services.logs import log_append
from apps.metering.selectors import Lease, lease_of_attempt  # Lease: the row's type, for hints
from apps.pool.models import Node

log = logging.getLogger(__name__)


class StaleAttempt(Exception):
    """A report about an attempt the server no longer runs on that node."""


def lease_for(node: Node, job_id: int, attempt: int) -> Lease:
    """``node``'s lease of attempt ``attempt`` of job ``job_id``.

    Raises:
        Job.DoesNotExist: the job has no lease of that attempt on this node (answered 404).
        StaleAttempt: the lease or the attempt is over (answered 409).
    """
    lease = lease_of_attempt(node=node, job_id=job_id, attempt=attempt)
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
    now = now or clock.now()
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
    attempt_accept(job=job, lease=lease, now=now)


def _on_staging(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    done = max(0, int(report.get("bytes_done") or 0))
    # An older agent sends no bytes_fetched: then every byte counts as downloaded.
    fetched = report.get("bytes_fetched", done if "bytes_cached" not in report else 0)
    attempt_staging(job=job, lease=lease, bytes_done=done, bytes_total=report.get("bytes_total"),
                    bytes_fetched=int(fetched or 0), message=str(report.get("message") or ""), now=now)


def _on_running(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    attempt_running(job=job, lease=lease, elapsed_s=report.get("elapsed_s"), now=now)


def _on_exited(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    attempt_exited(job=job, lease=lease, reason=report.get("reason") or EndReason.EXIT,
                   exit_code=report.get("exit_code"), message=str(report.get("message") or ""),
                   elapsed_s=report.get("elapsed_s"), now=now)


def _on_finished(job: Job, lease: Lease, report: dict, now: datetime) -> None:
    if report.get("exited") is not None:
        # Folded (protocol v2, nothing declared as output): the ``exited`` it stands for comes
        # first, at the same server time, exactly as if it had been sent on its own.
        _on_exited(job, lease, report["exited"], now)
    attempt_finished(job=job, lease=lease, exit_code=report.get("exit_code"), finished=_finished_words(job),
                     now=now)


def _finished_words(job: Job) -> list[RankFinished]:
    """The attempt's ``finished`` reports so far as plain words: rank, lost-output code, message.

    The code is the report's ``code`` when it is one of :data:`e31_protocol.LOST_OUTPUT`
    (``bundle_upload_failed``, ``packing_failed``, ``outputs_not_packed``), never the wording of its
    message; a protocol v2 agent sends no code, and :func:`e31_protocol.finish_code` reads its
    message's fixed prefix instead (for that one version).
    """
    words = []
    for rank, payload in job.agent_reports.filter(attempt=job.attempt, type=ReportType.FINISHED).values_list(
            "node_rank", "payload"):
        code = finish_code(payload)
        words.append(RankFinished(rank=rank, code=code if code in LOST_OUTPUT else "",
                                  message=str(payload.get("message") or "")))
    return words


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
