"""The jobs app's answers to the pool's signals (:mod:`apps.pool.signals`), connected in
:meth:`apps.jobs.apps.JobsConfig.ready`. They run in the sender's transaction."""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from apps.metering.lease import fences_lift
from apps.pool import signals as pool_signals
from apps.pool.models import Node

from . import signals
from .dependencies import on_job_released as dependents_settle
from .services.recovery import jobs_handle_node_loss
from .tasks import log_compact_task

log = logging.getLogger(__name__)


def on_node_lost(sender: Any, *, node: Node, at: datetime, **kwargs: Any) -> None:
    """Recover the jobs on a node declared down at ``at`` (its last heartbeat), then lift its
    fences: a node declared down stops its runs itself (SPEC §6)."""
    jobs_handle_node_loss(node=node, at=at)
    fences_lift(node=node)


def on_job_released(*, job_id: int, **_: Any) -> None:
    """Compact the released job's log into its storage object once the release commits
    (:func:`apps.jobs.services.logs.log_compact`)."""
    transaction.on_commit(lambda: _compact_later(job_id))


def _compact_later(job_id: int) -> None:
    try:
        log_compact_task.delay(job_id)
    except Exception:  # a broker hiccup must not fail the release; the rows stay readable
        log.warning("could not queue the log compaction of job %s", job_id, exc_info=True)


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch uid). The pool page's pushes are
    :mod:`apps.live.receivers`' own."""
    pool_signals.node_lost.connect(on_node_lost, dispatch_uid="jobs.node_lost")
    signals.job_released.connect(on_job_released, dispatch_uid="jobs.job_released.log_compact")
    # the jobs waiting for the released one: released cancelled now if they can never start (issue 25 item 7)
    signals.job_released.connect(dependents_settle, dispatch_uid="jobs.job_released.dependents")
