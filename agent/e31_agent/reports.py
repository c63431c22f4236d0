"""Ordered, retried job reports for one attempt (protocol: "job reports").

``send()`` numbers the report (``seq`` from 1) and queues it; one thread
sends the queue in order, retrying network errors and 5xx for ever with
backoff (the server applies each seq once, so a retry is harmless). A 409
"stale attempt" (or 404) drops everything queued and calls ``on_stale``.
Reports wait in memory only; buffering them on disk across an agent restart
is not done yet.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .client import Aborted, ApiClient, ApiError, StaleAttempt
from .models import JobRef

log = logging.getLogger(__name__)

TYPES = ("accepted", "staging", "running", "exited", "finished")
EXIT_REASONS = ("exit", "time_limit", "cancelled", "staging_failed", "start_failed")
MESSAGE_MAX = 2000  # characters of a report's message the server keeps


class Reporter:
    """The report channel of one (job, attempt)."""

    def __init__(
        self,
        client: ApiClient,
        ref: JobRef,
        *,
        abort: threading.Event,
        on_stale: Callable[[], None],
    ) -> None:
        self.client = client
        self.ref = ref
        self.abort = abort
        self.on_stale = on_stale
        self.seq = 0
        self.stale = False
        self.sent: list[dict[str, Any]] = []  # what the server acknowledged, in order
        self._queue: deque[dict[str, Any]] = deque()
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
            with self._cond:
                if self._queue and self._queue[0] is body:
                    self._queue.popleft()
                self._busy = False
                self._cond.notify_all()
