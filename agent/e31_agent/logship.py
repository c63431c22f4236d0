"""Streaming a job's log file to the server (protocol: "logs").

Chunks of at most 1 MiB, each posted with its byte offset in the combined
stdout+stderr stream, at least every 0.5 s while the job runs. Each post
holds bytes of one stream, read within a second of each other, and says
which (``stream=stdout|stderr``) and when its first bytes were read
(``at``, epoch seconds, the node's clock), from the log's index
(:mod:`e31_agent.logindex`); a log without an index goes as "combined". The server
skips bytes it already has, so a retried post is harmless. When the server
answers with a size short of what it was sent, it has reached its cap for
this log and the agent stops sending.

Through a server outage the post of the current chunk is retried for ever
with jittered backoff while the job goes on writing; once the server is
back the shipper catches up, 1 MiB at a time. Each acknowledged offset is
written to ``offset_path`` (when given), so an agent restarted mid-job
carries on from there instead of from byte 0; a chunk sent twice (the
acknowledgement was lost, or the agent died before writing the offset)
changes nothing on the server.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .client import Aborted, ApiClient, ApiError, StaleAttempt
from .logindex import Segment, index_path, parse_index
from .models import JobRef
from .state import write_atomic

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
INTERVAL_S = 0.5
SAME_TIME_S = 1.0  # a post's bytes were all read within this of its first (its timestamp)


class LogShipper:
    """Ships ``path`` for one (job, attempt) from a thread of its own."""

    def __init__(
        self,
        client: ApiClient,
        ref: JobRef,
        path: Path,
        *,
        abort: threading.Event,
        on_stale: Callable[[], None],
        interval_s: float = INTERVAL_S,
        offset_path: Path | None = None,
    ) -> None:
        self.client = client
        self.ref = ref
        self.path = path
        self.abort = abort
        self.on_stale = on_stale
        self.interval_s = interval_s
        self.offset_path = offset_path
        self.offset = 0  # bytes of the log the server has (or refused for good)
        if offset_path is not None:
            try:
                self.offset = int(offset_path.read_text().strip() or 0)
            except (OSError, ValueError):
                self.offset = 0
        self.capped = False
        self.indexed = False  # the log has an index: stdout and stderr are told apart
        self._index_pos = 0
        self._segments: list[Segment] = []
        self._final = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"log-{ref.job_id}-{ref.attempt}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout_s: float | None = None) -> bool:
        """Send what is left, then stop; False if still busy after ``timeout_s``."""
        self._final.set()
        self._wake.set()
        if not self._thread.is_alive() and self._thread.ident is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while not self.abort.is_set():
            final = self._final.is_set()
            try:
                self._ship()
            except StaleAttempt as exc:
                log.warning("%s: log refused as stale (%s)", self.ref, exc.detail)
                self.on_stale()
                return
            except Aborted:
                return
            except ApiError as exc:
                log.error("%s: log refused (%s); no more log is sent", self.ref, exc)
                return
            except OSError as exc:
                log.error("%s: cannot read log %s: %s", self.ref, self.path, exc)
                return
            if final or self.capped:
                return
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def _ship(self) -> None:
        """Send everything written since the last call, one stream per post when the log has
        an index (:mod:`e31_agent.logindex`), else as "combined"."""
        if not self.path.exists():
            return
        self._read_index()
        with open(self.path, "rb") as fh:
            while not self.capped:
                size = os.fstat(fh.fileno()).st_size
                start, length, stream, at = self._next_piece(size)
                if length <= 0:
                    return
                fh.seek(start)
                chunk = fh.read(length)
                if not chunk:
                    return
                size = self.client.log_chunk(
                    self.ref.job_id, self.ref.attempt, start, chunk, abort=self.abort, stream=stream, at=at
                )
                end = start + len(chunk)
                if size < end:
                    log.info("%s: server stores %d bytes of log; sending no more", self.ref, size)
                    self.capped = True
                self.offset = end
                if self.offset_path is not None:
                    try:
                        write_atomic(self.offset_path, str(end).encode())
                    except OSError:
                        pass  # the run dir went (a drop); a resend is harmless anyway

    def _read_index(self) -> None:
        """Take the index lines written since the last read (none when there is no index)."""
        idx = index_path(self.path)
        try:
            with open(idx, "rb") as fh:
                fh.seek(self._index_pos)
                segments, used = parse_index(fh.read())
        except FileNotFoundError:
            return
        self.indexed = True
        self._index_pos += used
        self._segments.extend(seg for seg in segments if seg.end > self.offset)

    def _next_piece(self, size: int) -> tuple[int, int, str | None, float | None]:
        """The next run of bytes to send from ``self.offset``: ``(start, length, stream, at)``.

        With an index: bytes of one stream, read within ``SAME_TIME_S`` of the run's first, at
        most ``CHUNK_BYTES``; bytes the index does not name are sent as "combined" (once the
        run has ended, or when indexed bytes follow them). Without: the next ``CHUNK_BYTES``.
        """
        while self._segments and self._segments[0].end <= self.offset:
            self._segments.pop(0)
        if not self.indexed:
            return self.offset, min(CHUNK_BYTES, size - self.offset), None, None
        if not self._segments:
            if self._final.is_set() and size > self.offset:  # bytes no pipe wrote (none expected)
                return self.offset, min(CHUNK_BYTES, size - self.offset), "combined", None
            return self.offset, 0, None, None
        first = self._segments[0]
        if first.offset > self.offset:
            return self.offset, min(CHUNK_BYTES, first.offset - self.offset), "combined", None
        end = min(first.end, self.offset + CHUNK_BYTES)
        for seg in self._segments[1:]:
            if seg.offset != end or seg.stream != first.stream or seg.at - first.at >= SAME_TIME_S:
                break
            end = min(seg.end, self.offset + CHUNK_BYTES)
            if end - self.offset >= CHUNK_BYTES:
                break
        return self.offset, min(end, size) - self.offset, first.stream, first.at
