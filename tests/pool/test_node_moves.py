"""A node's one door (issue 22 item 2, :mod:`apps.pool.state`): registration, drain and loss move a
node's state only through :func:`node_move`, which refuses a move not in ``NODE_MOVES`` and makes
none from a state the row has left (or when its condition no longer holds)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Q

from apps.core.choices import NODE_MOVES, NodeState
from apps.pool.models import Node
from apps.pool.services import node_heartbeat, node_register, node_set_drain, node_token_issue, nodes_mark_lost
from apps.pool.state import NodeMoveError, node_move

pytestmark = pytest.mark.django_db

INVENTORY = {"hostname": "host-m", "agent_version": "test", "cpus": 8, "memory_bytes": 10**10, "disk_bytes": 10**11,
             "runtimes": [], "simulated": True, "gpus": [{"index": 0, "uuid": "GPU-m0", "model": "L4-24GB",
                                                          "memory_mb": 24000}]}


def _node() -> Node:
    node_token_issue(name="node-m")
    return Node.objects.get(name="node-m")


def test_it_moves_a_node_down_up_draining_up_down_through_the_services(frozen_clock, settings):
    node = _node()
    assert node.state == NodeState.DOWN  # never registered
    assert node_register(node=node, inventory=INVENTORY).state == NodeState.UP
    assert node_set_drain(node=node, drain=True).state == NodeState.DRAINING
    assert node_set_drain(node=node, drain=True).state == NodeState.DRAINING  # no move: the state it is in
    assert node_set_drain(node=node, drain=False).state == NodeState.UP
    frozen_clock.advance(settings.E31_NODE_LOSS_TIMEOUT_S + 1)
    assert nodes_mark_lost() == [node.pk]
    assert Node.objects.get(pk=node.pk).state == NodeState.DOWN
    assert node_set_drain(node=node, drain=True).state == NodeState.DOWN  # a down node stays down
    assert node_register(node=node, inventory=INVENTORY).state == NodeState.DRAINING  # back, as asked


def test_a_heartbeat_that_lands_first_keeps_the_node_up(frozen_clock, settings):
    node = node_register(node=_node(), inventory=INVENTORY)
    frozen_clock.advance(settings.E31_NODE_LOSS_TIMEOUT_S + 1)
    stale = Node.objects.get(pk=node.pk)
    node_heartbeat(node=node)  # lands between the read and the move
    cutoff = frozen_clock.now() - timedelta(seconds=settings.E31_NODE_LOSS_TIMEOUT_S)
    assert node_move(stale, NodeState.DOWN, when=Q(last_heartbeat_at__lt=cutoff)) is False
    assert Node.objects.get(pk=node.pk).state == NodeState.UP
    assert nodes_mark_lost() == []


def test_a_move_from_a_state_the_row_left_moves_nothing(frozen_clock):
    node = node_register(node=_node(), inventory=INVENTORY)
    stale = Node.objects.get(pk=node.pk)  # read while up
    node_set_drain(node=node, drain=True)  # another process drained it
    assert node_move(stale, NodeState.DOWN) is False
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINING


@pytest.mark.parametrize("to", ["gone", "", "UP"])
def test_a_move_not_in_the_table_is_refused(frozen_clock, to):
    node = node_register(node=_node(), inventory=INVENTORY)
    assert all(to not in moves for moves in NODE_MOVES.values())
    with pytest.raises(NodeMoveError, match="not allowed"):
        node_move(node, to)
    assert Node.objects.get(pk=node.pk).state == NodeState.UP


def test_the_table_names_every_state_and_no_move_to_itself():
    assert set(NODE_MOVES) == set(NodeState)
    for src, moves in NODE_MOVES.items():
        assert src not in moves and moves <= set(NodeState)
