"""The one door of a node's state (SPEC §5, §6): no other code writes ``Node.state``.

:func:`node_move` checks the move against :data:`~apps.core.choices.NODE_MOVES` and makes it with
a conditional UPDATE; the services of :mod:`apps.pool.services` (registration, drain, loss) call it.
"""
from __future__ import annotations

from django.db.models import Q

from apps.core.choices import NODE_MOVES

from .models import Node


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
