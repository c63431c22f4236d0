"""The one door of a node's state (SPEC §5, §6): no other code writes ``Node.state``, nor a GPU's
quarantine (``Gpu.quarantine_reason``, ``Gpu.quarantined_at``: :func:`gpu_quarantine`, :func:`gpu_quarantine_lift`).

:func:`node_move` checks the move against :data:`~apps.core.choices.NODE_MOVES` and makes it with
a conditional UPDATE; the services of :mod:`apps.pool.services` (registration, drain, loss) call it.
"""
from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from apps.core.choices import NODE_MOVES

from .models import Gpu, Node


class NodeMoveError(Exception):
    """The node move is not in ``NODE_MOVES``."""


def node_move(node: Node, to: str, *, when: Q | None = None) -> bool:
    """Move ``node`` from its state (as last read) to ``to``. A move to the state it is in is none.

    Args:
        node: the node as last read (or locked); its ``state`` is the expected current state.
        to: a :class:`~apps.core.choices.NodeState` value.
        when: a further condition on the row, checked in the same UPDATE (the loss timeout:
            a heartbeat that lands meanwhile keeps the node up).

    Returns:
        True when the node is in ``to`` now; False when the row was no longer in the expected
        state, or ``when`` no longer held: nothing moved.

    Raises:
        NodeMoveError: ``node.state -> to`` is not an allowed move.
    """
    src = node.state
    if to == src:
        return True
    if to not in NODE_MOVES[src]:
        raise NodeMoveError(f"node {node.name or node.pk}: {src} -> {to} is not allowed")
    rows = Node.objects.filter(pk=node.pk, state=src)
    if when is not None:
        rows = rows.filter(when)
    if rows.update(state=to) != 1:
        return False
    node.state = to
    return True


def gpu_quarantine(gpu_id: int, reason: str, *, now: datetime) -> bool:
    """Quarantine a GPU: no job is placed on it (SPEC §5) until it is lifted. The one door of
    ``Gpu.quarantine_reason`` and ``Gpu.quarantined_at``.

    Args:
        gpu_id: the GPU's id.
        reason: plain words, e.g. "30,000 MiB of memory in use with no lease" (cut at 200 characters).
        now: the since-time of a new quarantine; a GPU already quarantined keeps its since-time and
            takes the new reason.

    Returns:
        True when the GPU was clean before (a new quarantine), else False.
    """
    reason = reason[:200]
    if Gpu.objects.filter(pk=gpu_id, quarantined_at__isnull=True).update(
            quarantine_reason=reason, quarantined_at=now):
        return True
    Gpu.objects.filter(pk=gpu_id).exclude(quarantine_reason=reason).update(quarantine_reason=reason)
    return False


def gpu_quarantine_lift(gpu_id: int) -> bool:
    """Lift a GPU's quarantine (a clean heartbeat, or an operator). Returns True when it was quarantined."""
    return bool(Gpu.objects.filter(pk=gpu_id, quarantined_at__isnull=False).update(
        quarantine_reason="", quarantined_at=None))
