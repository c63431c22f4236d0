"""Reads of the pool: the nodes overview (priced summaries: :mod:`apps.metering.selectors`; what an
agent is told: :mod:`apps.agent_api.selectors`)."""
from __future__ import annotations

from django.db.models import Count, Q

from .models import Node


def nodes_overview() -> list[Node]:
    """Every node with its count of present GPUs and their models, by name (staff view)."""
    nodes = list(Node.objects.annotate(gpu_count=Count("gpus", filter=Q(gpus__present=True)))
                 .prefetch_related("gpus").order_by("name"))
    for node in nodes:
        node.models = ", ".join(sorted({g.model for g in node.gpus.all() if g.present}))
    return nodes
