"""Ordered, retried job reports for one attempt (protocol: "job reports"),
buffered on disk so neither a server outage nor an agent restart loses one.

``send()`` numbers the report (``seq`` from 1), appends it to the attempt's
spool file (fsync'd before ``send()`` returns) and queues it; one thread
sends the queue in order, retrying network errors and 5xx for ever with
jittered backoff (0.5 s doubling to 30 s; the server applies each seq once,
so a retry is harmless). Each acknowledged seq is appended to the spool
too. A restarted agent builds the reporter from the same spool: what was
not acknowledged is sent again, in order, and new reports take the next
seq. A 409 "stale attempt" (or 404) drops everything queued and calls
``on_stale``.

Spool format (``reports.jsonl``): one JSON object a line, ``{"report":
BODY}`` or ``{"ack": SEQ}``; a torn last line (a crash mid-write) is
ignored.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .client import Aborted, ApiClient, ApiError, StaleAttempt
from .models import JobRef

log = logging.getLogger(__name__)

TYPES = ("accepted", "staging", "running", "exited", "finished")
EXIT_REASONS = ("exit", "time_limit", "cancelled", "staging_failed", "start_failed")
MESSAGE_MAX = 2000  # characters of a report's message the server keeps


class Spool:
    """The append-only report file of one attempt (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[int, list[dict[str, Any]]]:
        """``(highest seq written, reports not acknowledged in seq order)``."""
        reports: dict[int, dict[str, Any]] = {}
        acked: set[int] = set()
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return 0, []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if "report" in record:
                reports[int(record["report"]["seq"])] = record["report"]
            elif "ack" in record:
                acked.add(int(record["ack"]))
        top = max(reports, default=0)
        return top, [reports[s] for s in sorted(reports) if s not in acked]

    def append(self, record: dict[str, Any]) -> None:
        """Append one record and fsync it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = os.fstat(fd).st_size
            torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"  # a crash mid-line: end that line
            os.write(fd, (b"\n" if torn else b"") + json.dumps(record).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)


class Reporter:
    """The report channel of one (job, attempt).

    ``spool_path`` (the attempt's ``reports.jsonl``) makes it durable; an
    existing spool is replayed first. Without one, reports live in memory.
    """

    def __init__(
        self,
        client: ApiClient,
        ref: JobRef,
        *,
        abort: threading.Event,
        on_stale: Callable[[], None],
        spool_path: Path | None = None,
    ) -> None:
        self.client = client
        self.ref = ref
        self.abort = abort
        self.on_stale = on_stale
        self.seq = 0
        self.stale = False
        self.sent: list[dict[str, Any]] = []  # what the server acknowledged, in order
        self._queue: deque[dict[str, Any]] = deque()
        self._spool = Spool(spool_path) if spool_path is not None else None
        if self._spool is not None:
            self.seq, pending = self._spool.load()
            self._queue.extend(pending)
            if pending:
                log.info("%s: replaying %d buffered reports from seq %d", ref, len(pending), pending[0]["seq"])
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._loop, name=f"reports-{ref.job_id}-{ref.attempt}", daemon=True
        )
        self._thread.start()

    def send(self, type_: str, **fields: Any) -> int:
        """Queue a report of ``type_``; returns its seq (0 once the attempt is stale)."""
        if type_ not in TYPES:
            raise ValueError(f"unknown report type {type_!r}")
        if type_ == "exited" and fields.get("reason") not in EXIT_REASONS:
            raise ValueError(f"unknown exit reason {fields.get('reason')!r}")
        with self._cond:
            if self.stale or self._closed:
                return 0
            self.seq += 1
            body = {"attempt": self.ref.attempt, "seq": self.seq, "type": type_}
            body.update({k: v for k, v in fields.items() if v is not None or k == "exit_code"})
            if isinstance(body.get("message"), str) and len(body["message"]) > MESSAGE_MAX:
                body["message"] = body["message"][: MESSAGE_MAX - 3] + "..."
            if self._spool is not None:
                self._spool.append({"report": body})
            self._queue.append(body)
            self._cond.notify_all()
            return self.seq

    def wait_sent(self, timeout_s: float | None = None) -> bool:
        """Block until every queued report is sent (or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: (not self._queue and not self._busy) or self.abort.is_set(),
                timeout=timeout_s,
            )

    @property
    def pending(self) -> int:
        """Reports queued and not yet acknowledged."""
        with self._cond:
            return len(self._queue)

    def types_queued(self) -> list[str]:
        """The types of the reports not yet acknowledged, in order."""
        with self._cond:
            return [body["type"] for body in self._queue]

    def close(self) -> None:
        """Stop the sender thread once the queue is empty (or now, if aborted)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._queue or self._closed or self.abort.is_set(), timeout=1.0
                )
                if self.abort.is_set() or (self._closed and not self._queue):
                    self._cond.notify_all()
                    return
                if not self._queue:
                    continue
                body = self._queue[0]
                self._busy = True
            try:
                self.client.report(self.ref.job_id, body, abort=self.abort)
                self.sent.append(body)
                log.debug("%s: reported %s (seq %d)", self.ref, body["type"], body["seq"])
            except StaleAttempt as exc:
                log.warning("%s: server says stale attempt (%s); dropping it", self.ref, exc.detail)
                with self._cond:
                    self.stale = True
                    self._queue.clear()
                    self._busy = False
                    self._cond.notify_all()
                self.on_stale()
                return
            except Aborted:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                return
            except ApiError as exc:
                # refused for good (a 4xx): later reports may still apply
                log.error("%s: report %s refused: %s", self.ref, body["type"], exc)
            if self._spool is not None:
                try:
                    self._spool.append({"ack": body["seq"]})
                except OSError as exc:  # the run dir went (a drop): a repeat is harmless
                    log.debug("%s: cannot record ack: %s", self.ref, exc)
            with self._cond:
                if self._queue and self._queue[0] is body:
                    self._queue.popleft()
                self._busy = False
                self._cond.notify_all()
