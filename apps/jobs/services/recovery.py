"""Node loss (SPEC §4): a lost node's jobs are requeued (attempt + 1) or released ``node_lost``."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction

from apps.core import clock
from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs.models import Job
from apps.jobs.services.retries import job_requeue, retry_covers
from apps.jobs.state import TransitionError, transition
from apps.metering.lease import leases_end_lost
from apps.metering.models import Lease
from apps.pool.models import Node
from apps.pool.notify import node_wake

log = logging.getLogger(__name__)


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
            elif retry_covers(job, Outcome.NODE_LOST):
                job_requeue(job, detail=f"node {node.name} lost; back in the queue as attempt "
                                        f"{job.attempt + 1} of {job.max_attempts}")
            else:
                transition(job, JobState.RELEASED, detail=f"node {node.name} lost; no attempts left",
                           outcome=Outcome.NODE_LOST, end_reason=EndReason.NODE_LOST)
        except TransitionError:
            log.info("job %s moved while its node was lost", job.pk)


def jobs_reconcile_heartbeat(*, node: Node, running: list[dict[str, int]], min_age_s: float,
                             now: datetime | None = None) -> int:
    """Treat as lost the accepted attempts that ``node``'s agent no longer lists as running.

    An agent restarted mid-job kills what its predecessor left and stops
    listing those attempts; the server then handles them like a node loss
    (requeued, not charged). Only leases accepted more than ``min_age_s``
    ago are considered, so a heartbeat sent just before an accept loses
    nothing. The lost leases end at ``now`` (default: the server's clock, :func:`apps.core.clock.now`).
    Returns how many jobs it handled.
    """
    now = now or clock.now()
    listed = {(r["job_id"], r["attempt"]) for r in running}
    cutoff = now - timedelta(seconds=min_age_s)
    lost = {lease.job_id for lease in Lease.objects.filter(
        node=node, released_at__isnull=True, accepted_at__lt=cutoff).select_related("job")
        if (lease.job_id, lease.attempt) not in listed and lease.attempt == lease.job.attempt}
    if lost:
        with transaction.atomic():
            log.warning("node %s no longer runs jobs %s: treating them as lost", node.name, sorted(lost))
            jobs_handle_node_loss(node=node, at=now, job_ids=lost)
    return len(lost)
