"""The work long poll: ``GET work/?wait=&have=`` (docs/agent-protocol.md, "work")."""

from __future__ import annotations

import threading
from typing import Any

from e31_protocol import WORK_WAIT_MAX_S, payloads

from ..models import JobRef, WorkAnswer
from .transport import Transport


class WorkCalls(Transport):
    """Assignments, cancels and pre-stage offers for this node."""

    def work(
        self,
        wait_s: float,
        *,
        have: list[JobRef] | None = None,
        abort: threading.Event | None = None,
    ) -> WorkAnswer:
        """``GET work/?wait=`` long poll; ``wait_s`` (seconds) is clamped to 0..30.

        ``have``: the attempts this agent already holds (``?have=12.1,13.1``, protocol v2):
        their assignments, repeated until the server hears of them, do not make the poll
        answer at once. The HTTP timeout is ``wait`` + 15 s.
        """
        wait = max(0, min(WORK_WAIT_MAX_S, int(wait_s)))
        params: dict[str, Any] = {"wait": wait}
        if have:
            params["have"] = ",".join(f"{r.job_id}.{r.attempt}" for r in have)
        data: payloads.WorkResponse = self.request(
            "GET", "/work/", params=params, timeout_s=wait + 15.0, abort=abort
        )
        return WorkAnswer.from_json(data)
