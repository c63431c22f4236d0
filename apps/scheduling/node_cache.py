"""The cache-affinity side of pre-staging (issue 14 item 5): what each node's input cache holds.

Agents send ``cached_inputs`` (input identities, :func:`e31_protocol.inputs.input_identity`, most
recently used first) with each heartbeat (docs/agent-protocol.md); the cycle names queued jobs'
inputs the same way (:func:`apps.jobs.inputs.spec_input_identities`), so a node holding another
tenant's copy of an input is not preferred for it; :func:`node_cache_report` keeps them in :class:`~.models.NodeCache`,
writing only when they changed, and :func:`cached_inputs` gives the scheduling cycle every node's
set. An older agent sends no such field, or digests and sources (protocol v3) that match no
identity: its node is simply not preferred.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from apps.core import clock

from .models import NodeCache

REPORT_MAX = 1000  # identities kept per node (the heartbeat serializer refuses more)


def node_cache_report(*, node_id: int, inputs: Sequence[str], now: datetime | None = None) -> bool:
    """Store what ``node_id``'s cache holds: ``inputs`` identities (the first :data:`REPORT_MAX`);
    True if that changed (one read, and one write only then)."""
    keys = list(dict.fromkeys(str(k) for k in inputs))[:REPORT_MAX]
    row = NodeCache.objects.filter(node_id=node_id).only("inputs").first()
    if row is not None and row.inputs == keys:
        return False
    NodeCache.objects.update_or_create(node_id=node_id, defaults={"inputs": keys,
                                                                  "updated_at": now or clock.now()})
    return True


def cached_inputs() -> dict[int, frozenset[str]]:
    """``{node_id: input identities its cache holds}`` of every node that reported any."""
    return {node_id: frozenset(keys) for node_id, keys in NodeCache.objects.values_list("node_id", "inputs") if keys}
