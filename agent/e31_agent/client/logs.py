"""Log chunks: ``POST jobs/<id>/log/?attempt=&offset=`` with raw bytes (docs/agent-protocol.md, "logs")."""

from __future__ import annotations

import threading

from e31_protocol import payloads

from .transport import Transport


class LogCalls(Transport):
    """The job's combined stdout+stderr, shipped in chunks of at most 1 MiB."""

    def log_chunk(
        self,
        job_id: int,
        attempt: int,
        offset: int,
        chunk: bytes,
        *,
        abort: threading.Event | None = None,
        stream: str | None = None,
        at: float | None = None,
    ) -> int:
        """``POST jobs/<id>/log/``: ``chunk`` at byte ``offset`` of the log; returns the bytes the
        server holds (below ``offset + len(chunk)``: it hit its cap). ``stream``: "stdout",
        "stderr" or "combined" (None: not said, the server takes "combined"); ``at``: when the
        chunk's first bytes were read, epoch seconds (node clock)."""
        params: dict[str, object] = {"attempt": attempt, "offset": offset}
        if stream:
            params["stream"] = stream
        if at is not None:
            params["at"] = f"{at:.3f}"
        data: payloads.LogResponse = self.request(
            "POST",
            f"/jobs/{job_id}/log/",
            params=params,
            content=chunk,
            headers={"Content-Type": "application/octet-stream"},
            abort=abort,
            job_call=True,
        )
        return int(data.get("size", offset + len(chunk)))
