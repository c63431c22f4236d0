"""Following a job (or a job array) to its end by polling the API, streaming the log as it grows.

The log is read from ``GET /jobs/{id}/logs/?offset=N&attempt=A`` (``X-Next-Offset``); a job
requeued after a lost node starts a new attempt, whose log starts again at byte 0. The job
is done when it is released and its log has been read to ``log_size``.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from .client import Api
from .errors import Exit
from .output import Out, cell, state_text

POLL_S = 0.5  # seconds between polls at first, growing to POLL_MAX_S for long waits
POLL_MAX_S = 3.0


def poll_interval(elapsed_s: float) -> float:
    """Seconds to sleep after ``elapsed_s`` seconds of following: 0.5 s, +0.5 s a minute, at most 3 s."""
    return min(POLL_MAX_S, POLL_S + 0.5 * (elapsed_s // 60))


def write_raw(data: bytes) -> None:
    """Log bytes to stdout unchanged (a chunk may end inside a UTF-8 character)."""
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def follow_job(api: Api, out: Out, job_id: int, *, log: Callable[[dict[str, Any]], None] | None = None,
               from_offset: int = 0, sleep: Callable[[float], None] = time.sleep,
               stream: str | None = None) -> dict[str, Any]:
    """Poll job ``job_id`` until it is released, passing each new log chunk to ``log``.

    Args:
        log: called with ``{"job_id", "attempt", "offset", "next_offset", "data": bytes}`` per
            chunk; None: the log is not read.
        from_offset: the byte of the current attempt's log to start from.
        stream: "stdout" or "stderr": only that stream's bytes are passed on.

    Returns:
        The released job (``GET /jobs/{id}/``).

    Raises:
        CliError: an HTTP or network error (the server went away for good).
    """
    started = time.monotonic()
    offset, attempt, shown = from_offset, None, None
    while True:
        job = api.job(job_id)
        if attempt is not None and job["attempts"] != attempt:
            out.note(f"[yellow]job {job_id}: attempt {job['attempts']} (the previous one was lost)[/]")
            offset = 0
        attempt = job["attempts"]
        where = (job["state"], job.get("outcome"), job.get("queue_position"))
        if where != shown:
            shown = where
            extra = f" (queue position {job['queue_position']})" if job.get("queue_position") else ""
            out.note(f"[dim]job {job_id}: {state_text(job)}{extra}[/]")
        if log is not None:
            while True:  # the server answers at most 1 MiB per call
                data, nxt = api.log(job_id, offset, attempt, stream) if stream else api.log(job_id, offset, attempt)
                if nxt <= offset:
                    break
                if data:
                    log({"job_id": job_id, "attempt": attempt, "offset": offset, "next_offset": nxt, "data": data})
                offset = nxt
        if job["state"] == "released" and (log is None or offset >= (job.get("log_size") or 0)):
            return job
        sleep(poll_interval(time.monotonic() - started))


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
