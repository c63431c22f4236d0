"""Wake agents waiting in a long poll (``GET /api/v1/agent/work/``).

Each waiting poll listens on the channel-layer group ``node-<id>``; a
message there makes it look at the database again at once. With Redis this
crosses processes; standalone runs in one process with the in-memory layer.
"""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def node_group(node_id: int) -> str:
    """Channel-layer group name of a node's waiting polls."""
    return f"node-{node_id}"


def node_wake(node_id: int) -> None:
    """Tell node ``node_id``'s waiting poll, once the current transaction commits."""
    transaction.on_commit(lambda: _send(node_id))


def _send(node_id: int) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(node_group(node_id), {"type": "node.wake"})
    except Exception:  # a lost wake-up only costs latency: the poll times out and looks again
        log.warning("could not wake node %s", node_id, exc_info=True)
