"""Reads of the pool: pool summaries (the agents' work answer is in :mod:`apps.agent_api.selectors`)."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from apps.metering.models import LeaseGpu
from apps.metering.rates import current_rates

from .choices import NodeState
from .models import Gpu, Node


def pool_summary(now: datetime | None = None) -> list[dict[str, Any]]:
    """Per GPU model: total GPUs on nodes not down, free ones (on up nodes), rate per GPU-hour.

    Shape: ``[{"gpu_model", "total", "free", "rate_per_gpu_hour", "nodes"}]`` sorted by model.
    """
    now = now or timezone.now()
    held = set(LeaseGpu.objects.filter(open=True).values_list("gpu_id", flat=True))
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"total": 0, "free": 0, "nodes": set()})
    for gpu in Gpu.objects.filter(present=True).exclude(node__state=NodeState.DOWN).select_related("node"):
        row = rows[gpu.model]
        row["total"] += 1
        row["nodes"].add(gpu.node.name)
        if gpu.pk not in held and gpu.node.state == NodeState.UP:
            row["free"] += 1
    rates = current_rates(now)
    from apps.metering.rates import FALLBACK_RATE

    return [
        {"gpu_model": model, "total": r["total"], "free": r["free"], "nodes": len(r["nodes"]),
         "rate_per_gpu_hour": rates.get(model, FALLBACK_RATE)}
        for model, r in sorted(rows.items())
    ]


def nodes_overview() -> list[Node]:
    """Every node with its count of present GPUs and their models, by name (staff view)."""
    nodes = list(Node.objects.annotate(gpu_count=Count("gpus", filter=Q(gpus__present=True)))
                 .prefetch_related("gpus").order_by("name"))
    for node in nodes:
        node.models = ", ".join(sorted({g.model for g in node.gpus.all() if g.present}))
    return nodes
