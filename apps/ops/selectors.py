"""What ``/metrics`` reads: a few aggregate queries over jobs, the pool, leases and bundles.

Each is one ``GROUP BY`` or aggregate (no per-row Python over the queue or the ledger), so a scrape
costs a handful of indexed queries however many jobs the site holds.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, DecimalField, ExpressionWrapper, F, Min, Q, Sum

from apps.artifacts.models import Bundle
from apps.core.choices import JobState, NodeState
from apps.jobs.models import Job
from apps.metering.models import Lease, LeaseGpu
from apps.pool.models import Gpu, Node


def jobs_by_state() -> dict[str, int]:
    """Jobs not yet released, by state."""
    rows = Job.objects.exclude(state=JobState.RELEASED).values("state").annotate(n=Count("id"))
    return {row["state"]: row["n"] for row in rows}


def released_by_outcome() -> dict[str, int]:
    """Released jobs by outcome, since the site began (retention never deletes a job)."""
    rows = Job.objects.filter(state=JobState.RELEASED).values("outcome").annotate(n=Count("id"))
    return {row["outcome"] or "none": row["n"] for row in rows}


def queue_oldest_age_s(now: datetime) -> float:
    """Seconds the longest-queued job has waited (0 with an empty queue)."""
    oldest = Job.objects.filter(state=JobState.QUEUED).aggregate(at=Min("submitted_at"))["at"]
    return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0


def gpus_by_model_and_state() -> Counter[tuple[str, str]]:
    """GPUs present in their node's inventory, by ``(model, state)``: ``down`` (the node is not up),
    ``fenced`` (held by a fenced lease, SPEC §4), ``leased``, ``quarantined`` (held back as unclean,
    SPEC §5) or ``free``."""
    held = dict(LeaseGpu.objects.filter(open=True).values_list(
        "gpu_id", "lease__fenced_at"))
    counts: Counter[tuple[str, str]] = Counter()
    for gpu_id, model, node_state, quarantined_at in Gpu.objects.filter(present=True).values_list(
            "id", "model", "node__state", "quarantined_at"):
        if node_state != NodeState.UP:
            state = "down"
        elif gpu_id in held:
            state = "fenced" if held[gpu_id] is not None else "leased"
        elif quarantined_at is not None:
            state = "quarantined"
        else:
            state = "free"
        counts[(model, state)] += 1
    return counts


def gpus_quarantined() -> list[tuple[str, int, str]]:
    """Every quarantined GPU present: ``(node name, index, reason)``."""
    return list(Gpu.objects.filter(present=True, quarantined_at__isnull=False).order_by(
        "node__name", "index").values_list("node__name", "index", "quarantine_reason"))


def nodes() -> list[dict[str, Any]]:
    """Every node: ``name``, ``state``, ``drain``, ``last_heartbeat_at`` and its GPUs' last ``health``."""
    return list(Node.objects.values("name", "state", "drain", "last_heartbeat_at", "health"))


def spend() -> tuple[Decimal, Decimal]:
    """``(dollars per hour the open leases accrue now, dollars billed by closed charged leases)``."""
    rate = ExpressionWrapper(F("rate_per_gpu_hour") * F("gpu_count"), output_field=DecimalField())
    accruing = Lease.objects.filter(released_at__isnull=True, fenced_at__isnull=True, charged=True).aggregate(
        total=Sum(rate))["total"]
    billed = Lease.objects.filter(released_at__isnull=False, charged=True).aggregate(total=Sum("cost"))["total"]
    return accruing or Decimal(0), billed or Decimal(0)


def bundles() -> tuple[int, int]:
    """``(bytes of bundles complete and not expired, bundles waiting for their verification)``."""
    kept = Bundle.objects.filter(completed_at__isnull=False, expired_at__isnull=True).aggregate(
        total=Sum("size_bytes"))["total"]
    backlog = Bundle.objects.filter(Q(verifying_since__isnull=False), completed_at__isnull=True,
                                    refused="").count()
    return int(kept or 0), backlog
