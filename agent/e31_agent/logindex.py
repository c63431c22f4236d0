"""stdout and stderr of a job, kept apart in one log file plus an index.

The shim (:mod:`e31_agent.shim`) gives the command two pipes, one for stdout and one for
stderr, and copies what it reads from each to the job's log file (the combined stream, in the
order read) while appending one line per read to the index ``<log>.idx``::

    OFFSET LENGTH STREAM EPOCH

``OFFSET``/``LENGTH``: the bytes' place in the log file; ``STREAM``: ``o`` (stdout) or ``e``
(stderr); ``EPOCH``: when the shim read them, seconds since the epoch on the node's clock
(the agent clock: the server stores it as told, see docs/SPEC.md "Logs"). An index line is
written only after its bytes, so every byte an index line names is in the log. A log without
an index (an older shim still running a job across an agent upgrade) is shipped as "combined".
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .redactor import Redactor

STREAMS = {"o": "stdout", "e": "stderr"}
READ_BYTES = 64 * 1024


def index_path(log_path: Path | str) -> Path:
    """The index file of ``log_path``."""
    path = Path(log_path)
    return path.with_name(path.name + ".idx")


@dataclass(frozen=True)
class Segment:
    """Bytes ``[offset, offset + length)`` of the log, read from ``stream`` at ``at`` (epoch s)."""

    offset: int
    length: int
    stream: str
    at: float

    @property
    def end(self) -> int:
        return self.offset + self.length


def parse_index(text: bytes) -> tuple[list[Segment], int]:
    """Segments in the complete lines of ``text``; returns them and the bytes consumed
    (a last line without its newline is left for the next read)."""
    out = []
    used = text.rfind(b"\n") + 1
    for line in text[:used].splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2].decode(errors="replace") not in STREAMS:
            continue
        try:
            out.append(Segment(int(parts[0]), int(parts[1]), STREAMS[parts[2].decode()], float(parts[3])))
        except ValueError:
            continue
    return out, used


class StreamCopier:
    """Copies a command's stdout and stderr pipes to ``log_path`` and its index (shim side).

    ``secrets`` (``{name: value}``): each value of 6 characters or more is written as
    ``[secret NAME]`` (:class:`~e31_agent.redactor.Redactor`, one per stream), so it never reaches the file.
    """

    def __init__(self, log_path: Path | str, *, secrets: Mapping[str, str] | None = None) -> None:
        self.log_path = Path(log_path)
        self._secrets = dict(secrets or {})
        self._lock = threading.Lock()
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self._index = open(index_path(self.log_path), "ab", buffering=0)  # noqa: SIM115
        self._offset = os.fstat(self._log.fileno()).st_size
        self._threads: list[threading.Thread] = []

    def pipes(self) -> tuple[int, int, int, int]:
        """New (stdout_read, stdout_write, stderr_read, stderr_write) fds."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        return out_r, out_w, err_r, err_w

    def start(self, out_r: int, err_r: int) -> None:
        """Copy from the read ends in threads of their own until each sees end of file."""
        for fd, code in ((out_r, "o"), (err_r, "e")):
            thread = threading.Thread(target=self._copy, args=(fd, code), name=f"copy-{code}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _copy(self, fd: int, code: str) -> None:
        redactor = Redactor(self._secrets)
        try:
            while True:
                try:
                    data = os.read(fd, READ_BYTES)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                data = redactor.feed(data)
                if data:
                    self.write(data, code)
        finally:
            rest = redactor.flush()
            if rest:
                self.write(rest, code)
            os.close(fd)

    def write(self, data: bytes, code: str) -> None:
        """Append ``data`` of stream ``code`` ("o"/"e") to the log, then its index line."""
        with self._lock:
            at = time.time()
            self._log.write(data)
            self._index.write(f"{self._offset} {len(data)} {code} {at:.3f}\n".encode())
            self._offset += len(data)

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for both pipes to end; True when they have."""
        end = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)
