"""Files the agent streams from the site: inputs uploaded by users (``GET uploads/<id>/``) and the
checkpoint an attempt starts with (``GET jobs/<id>/checkpoint/``) (docs/agent-protocol.md, "work")."""

from __future__ import annotations

import email.message
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlencode

import httpx
from e31_protocol import API_PREFIX

from .transport import Aborted, ApiError, Transport, body_of


class UploadCalls(Transport):
    """Downloads of ``upload:<id>`` inputs (only for a job of the upload's owner held here)."""

    @contextmanager
    def open_upload(
        self, upload_id: str, *, abort: threading.Event | None = None, max_tries: int = 5
    ) -> Iterator[tuple[httpx.Response, str | None]]:
        """Stream ``GET uploads/<id>/``; yields the response and its file name.

        The file name comes from ``Content-Disposition`` when the server sends one. Only
        connecting is retried here (at most ``max_tries`` times); the caller retries a transfer
        that breaks half way.
        """
        with self._open_stream(f"{API_PREFIX}/uploads/{upload_id}/", abort=abort, max_tries=max_tries) as response:
            yield response, filename_of(response.headers.get("Content-Disposition"))

    @contextmanager
    def open_checkpoint_file(
        self, job_id: int, attempt: int, path: str, *, abort: threading.Event | None = None, max_tries: int = 5
    ) -> Iterator[httpx.Response]:
        """Stream ``GET jobs/<id>/checkpoint/?attempt=&path=``: one file of the checkpoint the
        attempt starts with (issue 24 item 5). Retries as :meth:`open_upload`."""
        url = f"{API_PREFIX}/jobs/{job_id}/checkpoint/?" + urlencode({"attempt": attempt, "path": path})
        with self._open_stream(url, abort=abort, max_tries=max_tries) as response:
            yield response

    @contextmanager
    def _open_stream(
        self, url: str, *, abort: threading.Event | None, max_tries: int
    ) -> Iterator[httpx.Response]:
        """A streamed ``GET url`` answered 2xx (redirects followed); raises :class:`ApiError` on a
        4xx (except 429) or once ``max_tries`` connections failed, :class:`Aborted` when stopped."""
        abort = abort or self.stop
        backoff = self._backoff()
        tries = 0
        while True:
            tries += 1
            try:
                # An object-store server answers 302 to a signed URL of the store; httpx drops the
                # Authorization header on a redirect to another origin (the URL carries its own).
                response = self._http.send(
                    self._http.build_request("GET", url), stream=True, follow_redirects=True
                )
            except httpx.TransportError:
                if tries >= max_tries:
                    raise
            else:
                if response.status_code < 300:
                    break
                response.read()
                body = body_of(response)
                response.close()
                if (
                    400 <= response.status_code < 500 and response.status_code != 429
                ) or tries >= max_tries:
                    raise ApiError(response.status_code, body, method="GET", url=url)
            if abort.wait(backoff.next()):
                raise Aborted(f"GET {url}")
        try:
            yield response
        finally:
            response.close()


def filename_of(disposition: str | None) -> str | None:
    """The ``filename`` parameter of a Content-Disposition header, if any."""
    if not disposition:
        return None
    msg = email.message.Message()
    msg["Content-Disposition"] = disposition
    name = msg.get_filename()
    return name or None
