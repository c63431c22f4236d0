"""The HTTP transport under every agent call: auth header, retries, errors (docs/agent-protocol.md).

Every call carries ``Authorization: Node <token>``. Network errors, 5xx and 429 are retried
with jittered exponential backoff (0.5 s doubling to 30 s) until they succeed, ``max_tries``
is spent, or the ``abort`` event is set; any other 4xx raises at once. Which answers mean
"stale attempt" is decided by :func:`e31_protocol.is_stale` (the ``code`` field), never here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx
from e31_protocol import API_PREFIX, ErrorCode, is_stale

from .. import __version__
from ..backoff import Backoff

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A 4xx answer (or 5xx once retries are spent); ``status`` is the HTTP code, ``code`` the
    answer's :class:`~e31_protocol.ErrorCode` (protocol v3; "" from an older server)."""

    def __init__(self, status: int, body: Any, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.body = body
        detail = body.get("detail") if isinstance(body, dict) else None
        self.detail = str(detail if detail is not None else body)[:500]
        self.code = str(body.get("code") or "") if isinstance(body, dict) else ""
        super().__init__(f"{method} {url}: HTTP {status}: {self.detail}")


class StaleAttempt(ApiError):
    """409 ``code: stale_attempt`` (or 404) on a job call: the server no longer runs
    this attempt on this node."""


class OffsetMismatch(ApiError):
    """409 on a bundle chunk: the server holds ``received_bytes``, not our offset."""

    def __init__(self, status: int, body: Any, **kw: Any) -> None:
        super().__init__(status, body, **kw)
        self.received_bytes = int(body["received_bytes"])


class Aborted(Exception):
    """The call was given up because its ``abort`` event was set."""


def body_of(response: httpx.Response) -> Any:
    """The answer's JSON, or its first 500 characters of text when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return response.text[:500]


def _is_offset_answer(status: int, body: Any) -> bool:
    """A bundle call's 409 that says where the server is (``received_bytes``), v2 or v3."""
    if status != 409 or not isinstance(body, dict) or "received_bytes" not in body:
        return False
    return body.get("code", ErrorCode.OFFSET_MISMATCH) == ErrorCode.OFFSET_MISMATCH


def retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (capped at 60)."""
    value = response.headers.get("Retry-After", "")
    try:
        return min(60.0, max(0.0, float(value)))
    except ValueError:
        return None


class Transport:
    """Holds the HTTP connection and sends calls as the protocol says (:meth:`request`).

    ``server`` is the site's base URL (``https://e31.example``); ``stop`` is the agent-wide
    event that ends every retry loop at shutdown (used when a call passes no ``abort`` of
    its own); ``timeout_s`` the default read timeout of a call, in seconds.
    """

    def __init__(
        self,
        server: str,
        token: str,
        *,
        stop: threading.Event | None = None,
        backoff: Callable[[], Backoff] = Backoff,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.stop = stop or threading.Event()
        self._backoff = backoff
        self._http = httpx.Client(
            base_url=self.server,
            headers={
                "Authorization": f"Node {token}",
                "User-Agent": f"e31-agent/{__version__}",
            },
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        abort: threading.Event | None = None,
        max_tries: int | None = None,
        job_call: bool = False,
    ) -> Any:
        """Send one call, retrying as the protocol says; returns the JSON body.

        ``path`` is relative to ``/api/v1/agent``. ``max_tries`` None retries for ever.
        ``job_call`` marks the per-job calls, where a stale answer
        (:func:`e31_protocol.is_stale`) raises :class:`StaleAttempt`.

        Raises:
            OffsetMismatch: a bundle call's 409 with ``received_bytes``.
            StaleAttempt: ``job_call`` and the attempt is over on this node.
            ApiError: any other 4xx (but 429), or a 5xx once ``max_tries`` is spent.
            httpx.TransportError: a network error once ``max_tries`` is spent.
            Aborted: ``abort`` (or the agent's ``stop``) was set.
        """
        abort = abort or self.stop
        url = API_PREFIX + path
        backoff = self._backoff()
        tries = 0
        while True:
            if abort.is_set():
                raise Aborted(f"{method} {url}")
            tries += 1
            delay: float | None = None
            try:
                response = self._http.request(
                    method,
                    url,
                    params=params,
                    json=json,
                    content=content,
                    headers=headers,
                    timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if max_tries is not None and tries >= max_tries:
                    raise
            else:
                status = response.status_code
                if status < 300:
                    return body_of(response) if response.content else {}
                body = body_of(response)
                if _is_offset_answer(status, body):
                    raise OffsetMismatch(status, body, method=method, url=url)
                if job_call and is_stale(status, body):
                    raise StaleAttempt(status, body, method=method, url=url)
                if 400 <= status < 500 and status != 429:
                    raise ApiError(status, body, method=method, url=url)
                if max_tries is not None and tries >= max_tries:
                    raise ApiError(status, body, method=method, url=url)
                problem = f"HTTP {status}"
                if status == 429:
                    delay = retry_after(response)
            if delay is None:
                delay = backoff.next()
            log.warning("%s %s failed (%s); retrying in %.1f s", method, url, problem, delay)
            if abort.wait(delay):
                raise Aborted(f"{method} {url}")
