"""Ordered, retried job reports for one attempt (protocol: "job reports"),
buffered on disk so neither a server outage nor an agent restart loses one.

``send()`` numbers the report (``seq`` from 1), appends it to the attempt's
spool file (fsync'd before ``send()`` returns) and queues it. One thread per
client (:class:`ReportSender`) sends the queues of every attempt of the
agent: whatever is pending, of several jobs, goes in one ``POST reports/``
call (protocol v2), each attempt's reports in seq order; it retries network
errors and 5xx for ever with jittered backoff (0.5 s doubling to 30 s; the
server applies each seq once, so a retry is harmless). The server answers
each report on its own: an acknowledged one is done, one not applied (5xx)
stays at the head of its queue and goes again. A server without the batch
call (404) gets one ``POST jobs/<id>/report/`` per report instead. Each
acknowledged seq is appended to the spool too. A restarted agent builds the reporter from the same spool: what was
not acknowledged is sent again, in order, and new reports take the next
seq. A stale answer (409 ``code: stale_attempt``, or 404; :func:`e31_protocol.is_stale`)
drops everything queued and calls ``on_stale``. Types, reasons and codes are the
:mod:`e31_protocol` enums.

Spool format (``reports.jsonl``): one JSON object a line, ``{"report":
BODY}`` or ``{"ack": SEQ}``; a torn last line (a crash mid-write) is
ignored.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from e31_protocol import MESSAGE_MAX, REPORTS_PER_BATCH_MAX, ExitReason, FinishCode, ReportType, is_stale

from .backoff import Backoff
from .client import Aborted, ApiClient, ApiError, StaleAttempt
from .models import JobRef

log = logging.getLogger(__name__)

BATCH_MAX = REPORTS_PER_BATCH_MAX  # reports in one ``POST reports/`` (the server's limit)


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
    ``sender``: the thread that sends them (default: the client's own,
    :meth:`ReportSender.of`).
    """

    def __init__(
        self,
        client: ApiClient,
        ref: JobRef,
        *,
        abort: threading.Event,
        on_stale: Callable[[], None],
        spool_path: Path | None = None,
        sender: ReportSender | None = None,
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
        self._sender = sender or ReportSender.of(client)
        self._cond = self._sender.cond  # one lock for the sender and all its reporters
        self._busy = False
        self._closed = False
        self._sender.add(self)

    def send(self, type_: ReportType, **fields: Any) -> int:
        """Queue a report of ``type_``; returns its seq (0 once the attempt is stale).

        ``finished`` may carry ``exited={"exit_code", "reason", "message"}``: the ``exited``
        it stands for too (folded, protocol v2: nothing declared as output), and ``code``, a
        :class:`~e31_protocol.FinishCode` saying what went wrong with the outputs (v3).

        Raises:
            ValueError: an unknown type, exit reason or finish code, or ``exited``/``code``
                on a report other than ``finished``.
        """
        type_ = ReportType(type_)
        if type_ == ReportType.EXITED:
            fields["reason"] = _reason(fields.get("reason"))
        if fields.get("code") is not None:
            if type_ != ReportType.FINISHED:
                raise ValueError("only finished carries a code")
            fields["code"] = FinishCode(fields["code"]).value
        if fields.get("exited") is not None:
            if type_ != ReportType.FINISHED:
                raise ValueError("exited folds only into finished, with a known reason")
            exited = dict(fields["exited"])
            exited["reason"] = _reason(exited.get("reason"))
            fields["exited"] = _cut_message(exited)
        with self._cond:
            if self.stale or self._closed:
                return 0
            self.seq += 1
            body = {"attempt": self.ref.attempt, "seq": self.seq, "type": type_.value}
            body.update({k: v for k, v in fields.items() if v is not None or k == "exit_code"})
            _cut_message(body)
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
        """Let the sender forget this attempt once its queue is empty (or now, if aborted)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- called by the sender, under ``self._cond`` ----------------------------

    @property
    def _done(self) -> bool:
        return self.abort.is_set() or self.stale or (self._closed and not self._queue)

    def _acked(self, body: dict[str, Any]) -> None:
        """``body`` is done with (applied, or refused for good): record it, take it off the queue."""
        self.sent.append(body)
        if self._spool is not None:
            try:
                self._spool.append({"ack": body["seq"]})
            except OSError as exc:  # the run dir went (a drop): a repeat is harmless
                log.debug("%s: cannot record ack: %s", self.ref, exc)
        if self._queue and self._queue[0] is body:
            self._queue.popleft()

    def _went_stale(self, detail: str) -> None:
        log.warning("%s: server says stale attempt (%s); dropping it", self.ref, detail)
        self.stale = True
        self._queue.clear()


def _reason(value: Any) -> str:
    """``value`` as an exit reason's wire word. Raises ``ValueError`` when it is none."""
    try:
        return ExitReason(value).value
    except ValueError:
        raise ValueError(f"unknown exit reason {value!r}") from None


def _cut_message(body: dict[str, Any]) -> dict[str, Any]:
    if isinstance(body.get("message"), str) and len(body["message"]) > MESSAGE_MAX:
        body["message"] = body["message"][: MESSAGE_MAX - 3] + "..."
    return body


class _BatchAbort:
    """Ends the retries of one batch call: when the agent stops, or every attempt in it is dropped.

    Quacks like the ``threading.Event`` :meth:`ApiClient.request` takes.
    """

    def __init__(self, stop: threading.Event, aborts: list[threading.Event]) -> None:
        self.stop = stop
        self.aborts = aborts

    def is_set(self) -> bool:
        return self.stop.is_set() or all(a.is_set() for a in self.aborts)

    def wait(self, timeout: float | None = None) -> bool:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while not self.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.stop.wait(min(left, 0.1))
        return True


class ReportSender:
    """The threads that send every :class:`Reporter`'s queue of a client.

    Each round takes what is pending, every attempt's queue in seq order (at
    most ``BATCH_MAX`` reports), and sends it in one ``POST reports/``. At
    most ``CALLS_IN_FLIGHT`` calls are out at once, and an attempt's reports
    are in one of them at a time (so they apply in order); what is queued
    meanwhile waits for the next round, so a busy node sends several jobs'
    reports per call and an idle one sends each report at once.
    """

    CALLS_IN_FLIGHT = 2

    _lock = threading.Lock()

    def __init__(self, client: ApiClient, *, backoff: Callable[[], Backoff] = Backoff) -> None:
        self.client = client
        self.cond = threading.Condition()
        self.batching = True  # False once the server answered 404 to the batch call (protocol v1)
        self._reporters: list[Reporter] = []
        self._backoff = backoff()
        self._threads = 0  # sending threads running; each ends after IDLE_EXIT_S without reporters

    IDLE_EXIT_S = 30.0

    @classmethod
    def of(cls, client: ApiClient) -> ReportSender:
        """The sender of ``client`` (one per client)."""
        with cls._lock:
            sender = getattr(client, "_report_sender", None)
            if sender is None:
                sender = cls(client)
                client._report_sender = sender  # type: ignore[attr-defined]
            return sender

    def add(self, reporter: Reporter) -> None:
        """Send ``reporter``'s queue from now on (starts the sending threads that are not running)."""
        with self.cond:
            self._reporters.append(reporter)
            while self._threads < self.CALLS_IN_FLIGHT:
                self._threads += 1
                threading.Thread(target=self._loop, name="reports", daemon=True).start()
            self.cond.notify_all()

    def _round(self) -> list[tuple[Reporter, dict[str, Any]]]:
        """Under ``cond``: forget the reporters that are done; take what is pending of those
        with no call out."""
        done = [r for r in self._reporters if r._done]
        for r in done:
            self._reporters.remove(r)
        if done:
            self.cond.notify_all()  # wait_sent() of the reporters just forgotten
        batch: list[tuple[Reporter, dict[str, Any]]] = []
        for r in self._reporters:
            if r._busy:
                continue  # its earlier reports are in a call still out
            taken = list(r._queue)[: BATCH_MAX - len(batch)]
            batch.extend((r, body) for body in taken)
            if taken:
                r._busy = True
        return batch

    def _loop(self) -> None:
        stop = self.client.stop
        idle_since = time.monotonic()
        while True:
            with self.cond:
                # No notify here: with two sending threads waiting on the one condition, a notify at
                # the top of each round woke the other thread, which woke this one: a busy loop that
                # cost a running job a third of a core (issue 27 item 3). Rounds notify what changed.
                batch = self._round()
                if stop.is_set() or (not self._reporters and time.monotonic() - idle_since > self.IDLE_EXIT_S):
                    self._threads -= 1
                    return
                if not batch:
                    if self._reporters:
                        idle_since = time.monotonic()
                    self.cond.wait(timeout=1.0)
                    continue
                idle_since = time.monotonic()
            try:
                if self.batching:
                    retry = self._send_batch(batch)
                else:
                    retry = self._send_singly(batch)
            except Aborted:
                retry = False  # the agent stops, or every attempt in the batch was dropped
            with self.cond:
                for r, _ in batch:
                    r._busy = False
                self.cond.notify_all()
            if retry:
                stop.wait(self._backoff.next())
            else:
                self._backoff.reset()

    def _send_batch(self, batch: list[tuple[Reporter, dict[str, Any]]]) -> bool:
        """One ``POST reports/``; returns True when some report must go again (after a pause)."""
        items = [{"job_id": r.ref.job_id, **body} for r, body in batch]
        abort = _BatchAbort(self.client.stop, [r.abort for r, _ in batch])
        try:
            # One try: after a network error or a 5xx the next round takes what is pending then.
            answers = self.client.report_batch(items, abort=abort, max_tries=1)  # type: ignore[arg-type]
        except httpx.TransportError as exc:
            log.warning("report batch not sent (%s: %s); trying again", type(exc).__name__, exc)
            return True
        except ApiError as exc:
            if exc.status >= 500 or exc.status == 429:
                log.warning("report batch not taken (%s); trying again", exc)
                return True
            if exc.status in (404, 405):
                log.info("the server has no batch report call; sending reports one by one")
                self.batching = False
                return False
            log.error("report batch refused (%s); sending reports one by one", exc)
            return self._send_singly(batch)
        if len(answers) != len(batch):
            log.error("report batch answered %d items for %d; sending again", len(answers), len(batch))
            return True
        retry = False
        stale: list[Reporter] = []
        blocked: set[int] = set()  # attempts with a report to send again: their later ones wait too
        with self.cond:
            for (r, body), answer in zip(batch, answers, strict=True):
                status = int(answer.get("status") or 0) if isinstance(answer, dict) else 0
                if r.stale or r.abort.is_set():
                    continue
                if id(r) in blocked:
                    continue
                if status == 200:
                    log.debug("%s: reported %s (seq %d)", r.ref, body["type"], body["seq"])
                    r._acked(body)
                elif is_stale(status, answer):
                    r._went_stale(str(answer.get("detail")))
                    stale.append(r)
                elif 400 <= status < 500 and status != 429:
                    log.error("%s: report %s refused: %s", r.ref, body["type"], answer)
                    r._acked(body)  # refused for good: later reports may still apply
                else:
                    retry = True  # not applied: it goes again, before the later ones of its attempt
                    blocked.add(id(r))
            self.cond.notify_all()
        for r in stale:
            r.on_stale()
        return retry

    def _send_singly(self, batch: list[tuple[Reporter, dict[str, Any]]]) -> bool:
        """Protocol v1: one ``POST jobs/<id>/report/`` per report, each attempt's in seq order."""
        for r, body in batch:
            if r.stale or r.abort.is_set():
                continue
            try:
                self.client.report(r.ref.job_id, body, abort=r.abort)
                log.debug("%s: reported %s (seq %d)", r.ref, body["type"], body["seq"])
            except StaleAttempt as exc:
                with self.cond:
                    r._went_stale(exc.detail)
                    self.cond.notify_all()
                r.on_stale()
                continue
            except Aborted:
                continue
            except ApiError as exc:
                # refused for good (a 4xx): later reports may still apply
                log.error("%s: report %s refused: %s", r.ref, body["type"], exc)
            with self.cond:
                r._acked(body)
                self.cond.notify_all()
        return False
