"""What the jobs app tells the layers above it (issue 13: layers used in one direction).

The jobs app never imports :mod:`apps.live` or :mod:`apps.notices`; it sends these signals
*inside* the transaction that makes the change, and the receivers that those apps connect in
their ``AppConfig.ready()`` (:mod:`apps.live.receivers`, :mod:`apps.notices.receivers`) run
right there, in the same transaction. A receiver that acts outside the database (a WebSocket
push, a mail) defers itself with ``transaction.on_commit``, so a rolled-back change is never
announced. Every signal is sent with ``sender=Job`` (or :class:`~apps.jobs.models.JobArray`
for an array's submit) and keyword arguments only.
"""
from __future__ import annotations

from django.dispatch import Signal

#: One job changed (a state change, a timeline event, staging progress).
#: Arguments: ``job_id: int``, ``owner_id: int | None`` (None: the receiver looks it up).
job_changed = Signal()

#: Several jobs of one owner changed at once (a submit of one job or a whole array).
#: Arguments: ``owner_id: int``, ``job_ids: list[int] | None`` (None: any queued job of theirs).
jobs_changed = Signal()

#: A job was released (any outcome). Arguments: ``job_id: int``.
job_released = Signal()

#: Bytes were stored in rank 0's log of an attempt. Arguments: ``job_id: int``, ``attempt: int``,
#: ``offset: int`` (byte offset of ``data`` in the log), ``data: bytes``, ``log_size: int`` (bytes
#: stored now, the message's version).
log_appended = Signal()

#: Queue places, estimates or reasons changed. Arguments: ``changes``: an iterable of
#: ``(owner_id, job_id)`` pairs.
queue_changed = Signal()
