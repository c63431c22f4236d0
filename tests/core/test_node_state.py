"""Issue 22 item 4: one ``NodeState``. The protocol defines it (the heartbeat answer sends it); the
server's choices (the node's column, its pages) are derived from it, so the two cannot drift."""
from __future__ import annotations

from e31_protocol import NodeState as ProtocolNodeState

from apps.core.choices import NodeState
from apps.pool.models import Node


def test_the_servers_node_states_are_the_protocols_in_its_order_with_labels():
    assert [s.value for s in NodeState] == [s.value for s in ProtocolNodeState] == ["up", "draining", "down"]
    assert [s.name for s in NodeState] == [s.name for s in ProtocolNodeState]
    assert NodeState.choices == [("up", "Up"), ("draining", "Draining"), ("down", "Down")]
    for state in ProtocolNodeState:
        assert NodeState(state) == state and NodeState[state.name] == state.value


def test_the_node_column_offers_exactly_the_protocols_states():
    field = Node._meta.get_field("state")
    assert [value for value, _label in field.choices] == [s.value for s in ProtocolNodeState]
    assert field.default == ProtocolNodeState.DOWN  # a node is down until it registers
