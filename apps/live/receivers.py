"""The live pages' receivers of the jobs and pool apps' signals (:mod:`apps.jobs.signals`,
:mod:`apps.pool.signals`).

Each runs inside the sender's transaction and defers its push to the commit
(:mod:`apps.live.push`), so a rolled-back change is never announced.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from apps.jobs import signals
from apps.pool import signals as pool_signals

from . import push


def on_job_changed(*, job_id: int, owner_id: int | None = None, **_: object) -> None:
    push.job_changed(job_id, owner_id)


def on_jobs_changed(*, owner_id: int, job_ids: list[int] | None, **_: object) -> None:
    ids = None if job_ids is None else list(job_ids)
    transaction.on_commit(lambda: push.jobs_changed(owner_id, ids), robust=True)


def on_pool_changed(**_: object) -> None:
    push.pool_changed()


def on_log_appended(*, job_id: int, attempt: int, offset: int, data: bytes, log_size: int,
                    stream: str = "combined", at: datetime | None = None, **_: object) -> None:
    push.log_chunk_added(job_id, attempt=attempt, offset=offset, data=data, log_size=log_size,
                         stream=stream, at=at.isoformat() if at else None)


def on_queue_changed(*, changes: Iterable[tuple[int, int]], **_: object) -> None:
    push.queue_changed(changes)


def connect() -> None:
    """Connect the receivers (``LiveConfig.ready``); idempotent (``dispatch_uid``)."""
    signals.job_changed.connect(on_job_changed, dispatch_uid="live.job_changed")
    signals.jobs_changed.connect(on_jobs_changed, dispatch_uid="live.jobs_changed")
    signals.log_appended.connect(on_log_appended, dispatch_uid="live.log_appended")
    signals.queue_changed.connect(on_queue_changed, dispatch_uid="live.queue_changed")
    pool_signals.pool_changed.connect(on_pool_changed, dispatch_uid="live.pool.pool_changed")
