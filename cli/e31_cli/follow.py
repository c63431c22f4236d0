"""Following a job (or a job array) to its end by polling the API, streaming the log as it grows.

The log is read from ``GET /jobs/{id}/logs/?offset=N&attempt=A`` (``X-Next-Offset``); a job
requeued after a lost node starts a new attempt, whose log starts again at byte 0. The job
is done when it is released and its log has been read to ``log_size``. A multi-node job has one
log per node rank (``&rank=R``); ``submit --watch`` reads them all and prefixes each line with its
rank (:class:`RankLines`).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from .client import Api
from .errors import Exit
from .output import Out, cell, outcome_text

POLL_S = 0.5  # seconds between polls at first, growing to POLL_MAX_S for long waits
POLL_MAX_S = 3.0


def poll_interval(elapsed_s: float) -> float:
    """Seconds to sleep after ``elapsed_s`` seconds of following: 0.5 s, +0.5 s a minute, at most 3 s."""
    return min(POLL_MAX_S, POLL_S + 0.5 * (elapsed_s // 60))


def write_raw(data: bytes) -> None:
    """Log bytes to stdout unchanged (a chunk may end inside a UTF-8 character)."""
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def job_nodes(job: dict[str, Any]) -> int:
    """How many nodes (ranks) ``job`` runs on: its spec's ``compute.nodes``, 1 when not given."""
    compute = (job.get("spec") or {}).get("compute") or {}
    nodes = compute.get("nodes")
    return nodes if isinstance(nodes, int) and nodes > 1 else 1


def follow_job(api: Api, out: Out, job_id: int, *, log: Callable[[dict[str, Any]], None] | None = None,
               from_offset: int = 0, sleep: Callable[[float], None] = time.sleep,
               stream: str | None = None, all_ranks: bool = False, note_end: bool = True) -> dict[str, Any]:
    """Poll job ``job_id`` until it is released, passing each new log chunk to ``log``.

    Args:
        log: called with ``{"job_id", "attempt", "rank", "offset", "next_offset", "data": bytes}`` per
            chunk; None: the log is not read.
        from_offset: the byte of the current attempt's log (rank 0's) to start from.
        stream: "stdout" or "stderr": only that stream's bytes are passed on.
        all_ranks: read every node rank's log of a multi-node job (each its own offsets), not rank 0's only.
        note_end: note the released state with its reason (False: the caller sums up the end itself).

    Returns:
        The released job (``GET /jobs/{id}/``).

    Raises:
        CliError: an HTTP or network error (the server went away for good).
    """
    started = time.monotonic()
    offsets, attempt, shown = {0: from_offset}, None, None
    while True:
        job = api.job(job_id)
        if attempt is not None and job["attempts"] != attempt:
            out.note(f"[yellow]job {job_id}: attempt {job['attempts']} (the previous one was lost)[/]")
            offsets = {}
        attempt = job["attempts"]
        released = job["state"] == "released"
        where = (job["state"], job.get("outcome"), job.get("queue_position"))
        if where != shown and (note_end or not released):
            shown = where
            extra = f" (queue position {job['queue_position']})" if job.get("queue_position") else ""
            out.note(f"[dim]job {job_id}: {outcome_text(job)}{extra}[/]")
        if log is not None:
            for rank in range(job_nodes(job) if all_ranks else 1):
                offsets[rank] = _read_log(api, job_id, attempt, rank, offsets.get(rank, 0), stream, log)
        # Rank 0's size is the job's log_size; the other ranks were read to their end after the release.
        if released and (log is None or offsets.get(0, 0) >= (job.get("log_size") or 0)):
            return job
        sleep(poll_interval(time.monotonic() - started))


def _read_log(api: Api, job_id: int, attempt: int, rank: int, offset: int, stream: str | None,
              log: Callable[[dict[str, Any]], None]) -> int:
    """Pass rank ``rank``'s new log bytes from ``offset`` to ``log``; returns the offset reached."""
    while True:  # the server answers at most 1 MiB per call
        data, nxt = api.log(job_id, offset, attempt, stream, rank=rank)
        if nxt <= offset:
            return offset
        if data:
            log({"job_id": job_id, "attempt": attempt, "rank": rank, "offset": offset, "next_offset": nxt,
                 "data": data})
        offset = nxt


class RankLines:
    """A ``log`` for :func:`follow_job` over several ranks: whole lines, each prefixed with its rank
    (``[rank 1] ...``), so that two nodes' output never mixes within a line.

    A rank's unfinished line waits for the rest (at most ``LINE_MAX`` bytes, then it is written as it
    is); :meth:`close` writes what is left. ``write`` takes bytes (default: stdout, unchanged).
    """

    LINE_MAX = 64 * 1024

    def __init__(self, write: Callable[[bytes], None] = write_raw) -> None:
        self.write = write
        self.pending: dict[int, bytes] = {}
        self.attempt: int | None = None

    def __call__(self, chunk: dict[str, Any]) -> None:
        if chunk["attempt"] != self.attempt:  # a new attempt's log starts afresh
            self.close()
            self.attempt = chunk["attempt"]
        rank = chunk["rank"]
        *lines, rest = (self.pending.pop(rank, b"") + chunk["data"]).split(b"\n")
        if len(rest) > self.LINE_MAX:
            lines, rest = [*lines, rest], b""
        if rest:
            self.pending[rank] = rest
        if lines:
            self.write(b"".join(self._prefix(rank) + line + b"\n" for line in lines))

    def close(self) -> None:
        """Write every rank's unfinished line (ended with a newline)."""
        pending, self.pending = self.pending, {}
        for rank in sorted(pending):
            self.write(self._prefix(rank) + pending[rank] + b"\n")

    @staticmethod
    def _prefix(rank: int) -> bytes:
        return f"[rank {rank}] ".encode()


def follow_array(api: Api, out: Out, array_id: int, *, sleep: Callable[[float], None] = time.sleep
                 ) -> list[dict[str, Any]]:
    """Poll array ``array_id`` until every task is released; returns its tasks by index."""
    started = time.monotonic()
    shown = None
    while True:
        array = api.json("GET", f"/arrays/{array_id}/")
        counts = array["counts"]
        line = ", ".join(f"{state} {n}" for state, n in counts.items() if state != "outcomes" and n)
        if line != shown:
            shown = line
            out.note(f"[dim]array {array_id}: {cell(line)}[/]")
        if counts.get("released", 0) >= array["size"]:
            return array_tasks(api, array_id)
        sleep(poll_interval(time.monotonic() - started))


def array_tasks(api: Api, array_id: int) -> list[dict[str, Any]]:
    """Every task of array ``array_id``, by index (all pages)."""
    out: list[dict[str, Any]] = []
    page = api.json("GET", "/jobs/", params={"array": array_id})
    while True:
        out.extend(page.get("results", []))
        if not page.get("next"):
            return out
        page = api.json("GET", page["next"])


def outcome_exit(jobs: list[dict[str, Any]]) -> Exit:
    """0 when every job succeeded, 1 when any ended otherwise, 3 when any has not ended."""
    if any(j["state"] != "released" for j in jobs):
        return Exit.PENDING
    return Exit.OK if all(j.get("outcome") == "succeeded" for j in jobs) else Exit.JOB_FAILED
