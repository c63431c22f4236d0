"""Streaming a job's log file to the server (protocol: "logs").

Chunks of at most 1 MiB, each posted with its byte offset in the combined
stdout+stderr stream, at least every 0.5 s while the job runs. The server
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
import threading
from collections.abc import Callable
from pathlib import Path

from .client import Aborted, ApiClient, ApiError, StaleAttempt
from .models import JobRef
from .state import write_atomic

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
INTERVAL_S = 0.5


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
        """Send everything written since the last call."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            while not self.capped:
                fh.seek(self.offset)
                chunk = fh.read(CHUNK_BYTES)
                if not chunk:
                    return
                size = self.client.log_chunk(
                    self.ref.job_id, self.ref.attempt, self.offset, chunk, abort=self.abort
                )
                end = self.offset + len(chunk)
                if size < end:
                    log.info("%s: server stores %d bytes of log; sending no more", self.ref, size)
                    self.capped = True
                self.offset = end
                if self.offset_path is not None:
                    try:
                        write_atomic(self.offset_path, str(end).encode())
                    except OSError:
                        pass  # the run dir went (a drop); a resend is harmless anyway
