"""Job reports: ``POST jobs/<id>/report/`` (v1) and ``POST reports/`` (v2 batch).

The ordering, spooling and batching of reports is :mod:`e31_agent.reports`' job; these are
the two calls it makes.
"""

from __future__ import annotations

import threading

from e31_protocol import payloads

from .transport import Transport


class ReportCalls(Transport):
    """The two ways a job report reaches the server."""

    def report(
        self, job_id: int, body: payloads.Report, *, abort: threading.Event | None = None
    ) -> payloads.ReportResponse:
        """``POST jobs/<id>/report/`` with ``attempt``, ``seq``, ``type``, ...

        Safe to retry: the server applies each seq once. Raises
        :class:`~e31_agent.client.StaleAttempt` when the attempt is over here.
        """
        return self.request("POST", f"/jobs/{job_id}/report/", json=body, abort=abort, job_call=True)

    def report_batch(
        self,
        items: list[payloads.BatchReport],
        *,
        abort: threading.Event | None = None,
        max_tries: int | None = None,
    ) -> list[payloads.ReportResult]:
        """``POST reports/`` (protocol v2): several reports, each with its ``job_id``, in one call.

        Returns the server's answer for each item, in order (``status`` 200, 400, 404, 409,
        5xx; ``code`` on the refusals, protocol v3). Safe to retry as a whole. Raises
        :class:`~e31_agent.client.ApiError` 404 from a server without the call.
        """
        body: payloads.ReportBatchRequest = {"reports": items}
        data = self.request("POST", "/reports/", json=body, abort=abort, max_tries=max_tries)
        results = data.get("results") if isinstance(data, dict) else None
        return results if isinstance(results, list) else []
