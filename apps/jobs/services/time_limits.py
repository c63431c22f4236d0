"""Time limits enforced by the server itself, for an agent cut off from it (SPEC §4)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from apps.core import clock
from apps.core.choices import EndReason, JobState, Outcome
from apps.jobs.models import Job
from apps.jobs.services.retries import attempt_release
from apps.jobs.state import TransitionError, transition
from apps.metering.lease import leases_release, leases_stop
from apps.pool.notify import node_wake


def jobs_enforce_time_limits(grace_s: int | None = None, *, now: datetime | None = None) -> int:
    """End, on the server's own authority, runs past ``rented_at + time_limit + grace``.

    For an agent cut off from the server: the meter stops at the limit and
    the job is released ``timed_out``; its GPUs stay fenced (held, unbilled) until
    the node's heartbeat no longer lists the attempt, or the node is declared down.
    ``grace_s``: seconds past the limit before the server acts (default ``E31_GRACE_S`` +
    ``E31_TIME_LIMIT_SLACK_S``, 30 s);
    ``now``: the time of the check and of the release (default :func:`apps.core.clock.now`).
    Returns how many jobs it ended.
    """
    grace = settings.E31_GRACE_S + settings.E31_TIME_LIMIT_SLACK_S if grace_s is None else grace_s
    now = now or clock.now()
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
                attempt_release(job, outcome=Outcome.TIMED_OUT, detail="released: timed out (server)", now=now)
            except TransitionError:
                continue
            for lease in job.leases.filter(attempt=job.attempt):
                node_wake(lease.node_id)
        ended += 1
    return ended
