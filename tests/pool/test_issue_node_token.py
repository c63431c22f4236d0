"""``manage.py issue_node_token NODE [NODE ...]``: a token per node, one per line, in order; a bad
name refuses the whole command before any node is made."""
import io

import pytest
from django.core.management import CommandError, call_command

from apps.pool.models import Node
from apps.pool.services import node_for_token


@pytest.mark.django_db
def test_it_prints_one_working_token_per_node_in_the_order_given():
    out = io.StringIO()
    call_command("issue_node_token", "node-a", "node-b", stdout=out)
    tokens = out.getvalue().split()
    assert len(tokens) == 2 and len(set(tokens)) == 2
    assert [node_for_token(t).name for t in tokens] == ["node-a", "node-b"]


@pytest.mark.django_db
def test_a_bad_name_makes_no_node():
    with pytest.raises(CommandError, match="'bad name'"):
        call_command("issue_node_token", "node-a", "bad name", stdout=io.StringIO())
    assert not Node.objects.exists()
