"""Scheduling's answers to the pool's signals (:mod:`apps.pool.signals`), connected in
:meth:`apps.scheduling.apps.SchedulingConfig.ready`."""
from __future__ import annotations

from typing import Any

from apps.pool import signals as pool_signals

from .tasks import enqueue_schedule_cycle


def on_capacity_added(sender: Any, **kwargs: Any) -> None:
    """GPUs may take jobs now: ask for a cycle once the pool's transaction commits."""
    enqueue_schedule_cycle()


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch uid)."""
    pool_signals.capacity_added.connect(on_capacity_added, dispatch_uid="scheduling.capacity_added")
