"""Pre-staging progress: ``POST prestage/`` (docs/agent-protocol.md, "Pre-staging")."""

from __future__ import annotations

import threading

from e31_protocol import payloads

from .transport import Transport


class PrestageCalls(Transport):
    """Inputs of queued jobs fetched ahead into the node's cache, meter off."""

    def prestage_report(
        self, jobs: list[payloads.PrestageProgress], *, abort: threading.Event | None = None
    ) -> list[int]:
        """``POST prestage/``: progress of queued jobs' inputs fetched ahead.

        ``jobs``: ``[{"job_id", "state", "bytes_done", "bytes_total", "message"}]``
        (``state`` a :class:`~e31_protocol.PrestageState`). Informational, so tried 3 times
        at most. Returns the job ids the server still wants pre-staged here.
        """
        body: payloads.PrestageRequest = {"jobs": jobs}
        data: payloads.PrestageResponse = self.request("POST", "/prestage/", json=body, abort=abort, max_tries=3)
        return [int(j) for j in data.get("prestage") or []]
