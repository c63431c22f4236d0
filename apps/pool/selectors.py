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


def scheme_readers(scheme: str) -> int | None:
    """How many nodes' agents can read ``data[i].source`` scheme ``scheme`` (``s3``, ``gs``...); an
    agent that does not say (registered before issue 28) counts as one that can. None when the
    site has no node yet (the pool's own refusal speaks then)."""
    said = list(Node.objects.values_list("data_schemes", flat=True))
    if not said:
        return None
    return sum(1 for schemes in said if schemes is None or scheme in schemes)
