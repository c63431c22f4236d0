"""Usage samples: ``POST jobs/<id>/samples/?attempt=`` (docs/agent-protocol.md, "samples")."""

from __future__ import annotations

import threading

from e31_protocol import HealthSource, payloads

from .transport import Transport


class SampleCalls(Transport):
    """The job's CPU, memory and GPU samples, a batch at a time (optional: charts only)."""

    def samples_post(
        self,
        job_id: int,
        attempt: int,
        samples: list[payloads.Sample],
        *,
        gpu_source: HealthSource,
        abort: threading.Event | None = None,
        max_tries: int | None = 1,
    ) -> int:
        """``POST jobs/<id>/samples/``: a batch of samples of the attempt; returns how many the
        server newly stored. One try by default: the sampler keeps the batch and sends it with
        the next one.

        Raises:
            StaleAttempt: the attempt is over here, or (404) the server has no such call.
            ApiError, httpx.TransportError, Aborted: as :meth:`Transport.request`.
        """
        body: payloads.SamplesRequest = {"gpu_source": gpu_source, "samples": samples}
        data: payloads.SamplesResponse = self.request(
            "POST", f"/jobs/{job_id}/samples/", params={"attempt": attempt}, json=body,
            abort=abort, max_tries=max_tries, job_call=True,
        )
        return int(data.get("stored", 0))
