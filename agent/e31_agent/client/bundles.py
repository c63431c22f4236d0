"""The output bundle: ``GET``/``PUT jobs/<id>/bundle/`` and ``POST jobs/<id>/bundle/complete/``.

Resumable: the server says how many bytes it holds; :mod:`e31_agent.uploader` drives these.
"""

from __future__ import annotations

import threading

from e31_protocol import payloads

from ..models import FileEntry
from .transport import Transport


class BundleCalls(Transport):
    """The chunked, checksummed upload of one attempt's bundle."""

    def bundle_received(self, job_id: int, attempt: int, *, abort: threading.Event | None = None) -> int:
        """``GET jobs/<id>/bundle/``: how many bytes of the bundle the server has."""
        data: payloads.BundleStatusResponse = self.request(
            "GET",
            f"/jobs/{job_id}/bundle/",
            params={"attempt": attempt},
            abort=abort,
            job_call=True,
        )
        return int(data.get("received_bytes", 0))

    def bundle_status(
        self, job_id: int, attempt: int, *, abort: threading.Event | None = None
    ) -> payloads.BundleStatusResponse:
        """``GET jobs/<id>/bundle/``: bytes held, complete, and (object-store servers) ``direct``,
        ``verifying``, ``refused``."""
        return self.request(
            "GET",
            f"/jobs/{job_id}/bundle/",
            params={"attempt": attempt},
            abort=abort,
            job_call=True,
        )

    def bundle_direct_start(
        self, job_id: int, attempt: int, *, size_bytes: int, abort: threading.Event | None = None
    ) -> payloads.BundleDirectResponse:
        """``POST jobs/<id>/bundle/direct/``: start or resume the upload straight to the store."""
        return self.request(
            "POST",
            f"/jobs/{job_id}/bundle/direct/",
            params={"attempt": attempt},
            json={"size_bytes": size_bytes},
            abort=abort,
            job_call=True,
        )

    def bundle_put(
        self,
        job_id: int,
        attempt: int,
        offset: int,
        chunk: bytes,
        sha256: str,
        *,
        abort: threading.Event | None = None,
    ) -> int:
        """``PUT jobs/<id>/bundle/?offset=``: one verified chunk; returns bytes received.

        Raises :class:`~e31_agent.client.OffsetMismatch` when the server holds another offset
        and :class:`~e31_agent.client.ApiError` (400) when the chunk's checksum did not match.
        """
        data: payloads.BundleChunkResponse = self.request(
            "PUT",
            f"/jobs/{job_id}/bundle/",
            params={"attempt": attempt, "offset": offset},
            content=chunk,
            headers={"Content-Type": "application/octet-stream", "X-Content-Sha256": sha256},
            timeout_s=120.0,
            abort=abort,
            job_call=True,
        )
        return int(data["received_bytes"])

    def bundle_complete(
        self,
        job_id: int,
        attempt: int,
        *,
        size_bytes: int,
        sha256: str,
        files: list[FileEntry],
        abort: threading.Event | None = None,
        unmatched: list[str] | None = None,
    ) -> payloads.BundleCompleteResponse:
        """``POST jobs/<id>/bundle/complete/``: the server verifies size, checksum and manifest.
        ``unmatched``: the declared outputs that matched no file (the server shows a warning)."""
        body: payloads.BundleCompleteRequest = {
            "size_bytes": size_bytes,
            "sha256": sha256,
            "files": [f.to_json() for f in files],  # type: ignore[misc]
        }
        if unmatched is not None:
            body["unmatched"] = list(unmatched)
        return self.request(
            "POST",
            f"/jobs/{job_id}/bundle/complete/",
            params={"attempt": attempt},
            json=body,
            timeout_s=120.0,
            abort=abort,
            job_call=True,
        )
