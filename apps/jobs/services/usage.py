"""What a released job feeds the fair-share usage (by project and owner) and runtime history."""
from __future__ import annotations

from datetime import datetime

from apps.jobs.models import Job
from apps.scheduling.usage import usage_record


def job_usage_record(job: Job, now: datetime) -> None:
    """Feed the fair-share usage of the owner in the job's project (GPU-seconds billed in the current
    attempt; no project: the owner's personal one) and the owner's runtime history (seconds from run
    start to run end) with released ``job``; ``now`` is the release time."""
    gpu_seconds = sum(lease.billed_seconds * lease.gpu_count for lease in
                      job.leases.filter(attempt=job.attempt, charged=True, billed_seconds__isnull=False))
    runtime = ((job.run_ended_at - job.run_started_at).total_seconds()
               if job.run_started_at and job.run_ended_at else None)
    usage_record(owner_id=job.owner_id, project_id=job.project_id, gpu_seconds=gpu_seconds, runtime_s=runtime,
                 now=now)
