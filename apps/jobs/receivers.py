"""The jobs app's answers to the pool's signals (:mod:`apps.pool.signals`), connected in
:meth:`apps.jobs.apps.JobsConfig.ready`. They run in the sender's transaction."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from apps.metering.services import fences_lift
from apps.pool import signals as pool_signals
from apps.pool.models import Node

from .services.recovery import jobs_handle_node_loss


def on_node_lost(sender: Any, *, node: Node, at: datetime, **kwargs: Any) -> None:
    """Recover the jobs on a node declared down at ``at`` (its last heartbeat), then lift its
    fences: a node declared down stops its runs itself (SPEC §6)."""
    jobs_handle_node_loss(node=node, at=at)
    fences_lift(node=node)


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch uid). The pool page's pushes are
    :mod:`apps.live.receivers`' own."""
    pool_signals.node_lost.connect(on_node_lost, dispatch_uid="jobs.node_lost")
