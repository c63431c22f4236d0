"""Usage samples an agent sends about a job it runs (docs/agent-protocol.md, "samples"): checked
like every per-job call (this node's lease of the current attempt), then stored by
:func:`apps.jobs.services.samples.samples_store`."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from apps.agent_api.reports import lease_for
from apps.core import clock
from apps.jobs.services.samples import samples_store
from apps.pool.models import Node


def agent_samples_store(*, node: Node, job_id: int, attempt: int, gpu_source: str,
                        samples: list[dict[str, Any]], now: datetime | None = None) -> int:
    """Store samples ``node``'s agent took of its rank of the attempt; returns how many were new.

    Raises:
        Job.DoesNotExist: the job has no lease of that attempt on this node (answered 404): a
            node never writes samples into another node's job.
        StaleAttempt: the lease or the attempt is over (answered 409).
    """
    with transaction.atomic():
        rank = lease_for(node, job_id, attempt).node_rank
        return samples_store(job_id=job_id, attempt=attempt, rank=rank, gpu_source=gpu_source, samples=samples,
                             now=now or clock.now())
