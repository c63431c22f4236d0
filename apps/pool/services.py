"""Writes to the pool: node tokens, registration, heartbeats, loss (SPEC §5, §6)."""
from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q

from apps.core import clock
from apps.core.choices import NodeState

from . import signals
from .models import Gpu, Node, NodeDowntime, token_digest
from .quarantine import gpus_check_clean
from .state import node_move

log = logging.getLogger(__name__)


def node_token_issue(*, name: str) -> str:
    """Create node ``name`` if new and give it a fresh token (the old one stops working).

    Returns:
        The token, shown once; only its sha256 is stored.
    """
    token = "e31n_" + secrets.token_urlsafe(32)
    node, _ = Node.objects.get_or_create(name=name)
    node.token_hash = token_digest(token)
    node.save(update_fields=["token_hash"])
    return token


def node_for_token(token: str) -> Node | None:
    """The node a token acts for, or None."""
    if not token:
        return None
    return Node.objects.filter(token_hash=token_digest(token)).first()


@transaction.atomic
def node_register(*, node: Node, inventory: dict[str, Any], now: datetime | None = None) -> Node:
    """Record the agent's inventory (already validated) at ``now`` and mark the node up (draining
    when the operator asked for it).

    GPUs are matched by index; ones no longer reported are kept (leases
    point at them) but marked not present, so the scheduler offers them to
    no one.
    """
    now = now or clock.now()
    node = Node.objects.select_for_update().get(pk=node.pk)
    was_down = node.state == NodeState.DOWN
    for key in ("hostname", "agent_version", "cpus", "memory_bytes", "disk_bytes", "runtimes", "simulated"):
        setattr(node, key, inventory[key])
    node.sandboxed = bool(inventory.get("sandboxed", False))  # an agent that does not say is not sealed
    node.data_schemes = inventory.get("data_schemes")  # None: it does not say (read as every scheme)
    node.registered_at = node.last_heartbeat_at = now
    node.first_registered_at = node.first_registered_at or now
    node.save(update_fields=["hostname", "agent_version", "cpus", "memory_bytes", "disk_bytes", "runtimes",
                             "simulated", "sandboxed", "data_schemes", "registered_at", "last_heartbeat_at",
                             "first_registered_at"])
    node_move(node, NodeState.DRAINING if node.drain else NodeState.UP)  # the row is locked: it moves
    seen = set()
    for gpu in inventory["gpus"]:
        Gpu.objects.update_or_create(
            node=node, index=gpu["index"],
            defaults={"uuid": gpu["uuid"], "model": gpu["model"], "memory_mb": gpu["memory_mb"], "present": True},
        )
        seen.add(gpu["index"])
    node.gpus.exclude(index__in=seen).update(present=False)
    signals.pool_changed.send(sender=Node)  # the pool page shows the node up with its GPUs
    if was_down:
        node_up_record(node=node, at=now)  # the record of down time (operator report)
        signals.capacity_added.send(sender=Node)
    return node


def node_heartbeat(*, node: Node, health: dict[str, Any] | None = None, now: datetime | None = None) -> None:
    """Stamp a heartbeat at ``now`` (the server's clock). A down node must register again.

    ``health`` (validated: ``{"source", "gpus": [...]}``, see ``Node.health``) replaces the
    stored one, stamped with the server's time as ``at`` (ISO 8601), and quarantines each GPU it shows
    unclean, or lifts it when clean again (:func:`apps.pool.quarantine.gpus_check_clean`).
    """
    now = now or clock.now()
    beat = Node.objects.filter(pk=node.pk)
    if health is None:
        beat.update(last_heartbeat_at=now)
    else:
        beat.update(last_heartbeat_at=now,
                    health={**health, "gpus": [dict(g) for g in health.get("gpus", [])], "at": now.isoformat()})
        gpus_check_clean(node=node, health=health, now=now)  # unclean GPUs are held back (SPEC §5)


@transaction.atomic
def node_set_drain(*, node: Node, drain: bool) -> Node:
    """Start or stop draining: a draining node keeps its jobs and takes no new ones."""
    node = Node.objects.select_for_update().get(pk=node.pk)
    node.drain = drain
    node.save(update_fields=["drain"])
    if node.state != NodeState.DOWN:  # a down node comes back by registering, draining if asked
        node_move(node, NodeState.DRAINING if drain else NodeState.UP)  # the row is locked: it moves
    signals.pool_changed.send(sender=Node)
    if not drain:
        signals.capacity_added.send(sender=Node)
    return node


def nodes_mark_lost(*, now: datetime | None = None) -> list[int]:
    """Mark down every node silent for the loss timeout at ``now`` and requeue its jobs.

    Returns the ids of the nodes marked down. Each loss is told to the layers above by
    :data:`apps.pool.signals.node_lost` in the node's transaction (the jobs app requeues or ends
    the jobs and lifts the node's fences, :mod:`apps.jobs.receivers`).
    """
    cutoff = (now or clock.now()) - timedelta(seconds=settings.E31_NODE_LOSS_TIMEOUT_S)
    lost = []
    for node in Node.objects.exclude(state=NodeState.DOWN).filter(last_heartbeat_at__lt=cutoff).only("id", "state"):
        with transaction.atomic():
            # Conditional UPDATE: a heartbeat that lands meanwhile keeps the node up.
            if not node_move(node, NodeState.DOWN, when=Q(last_heartbeat_at__lt=cutoff)):
                continue
            node_id = node.pk
            node = Node.objects.get(pk=node_id)
            log.warning("node %s lost: no heartbeat since %s", node.name, node.last_heartbeat_at)
            node_down_record(node=node, at=node.last_heartbeat_at)  # the record of down time
            signals.node_lost.send(sender=Node, node=node, at=node.last_heartbeat_at)
            signals.pool_changed.send(sender=Node)
            lost.append(node_id)
    return lost


def node_down_record(*, node: Node, at: datetime) -> None:
    """Record that ``node`` went down at ``at`` (its last heartbeat), with its GPUs by model.

    Idempotent: a node already recorded down keeps its first span (the
    partial unique constraint ``one_open_downtime_per_node`` backs this).
    """
    if NodeDowntime.objects.filter(node=node, up_at__isnull=True).exists():
        return
    gpus = dict(node.gpus.filter(present=True).values_list("model").annotate(n=Count("id")))
    try:
        with transaction.atomic():
            NodeDowntime.objects.create(node=node, down_at=at, gpus=gpus)
    except IntegrityError:  # another pass recorded it meanwhile
        pass


def node_up_record(*, node: Node, at: datetime) -> None:
    """Close ``node``'s open down span at ``at`` (it registered again); nothing if none is open."""
    for span in NodeDowntime.objects.filter(node=node, up_at__isnull=True):
        span.up_at = max(at, span.down_at)
        span.save(update_fields=["up_at"])
