"""Thin typed HTTP client for the agent API (docs/agent-protocol.md).

One method per call of the protocol. Every call carries
``Authorization: Node <token>``. Network errors, 5xx and 429 are retried
with jittered exponential backoff (0.5 s doubling to 30 s) until they
succeed, ``max_tries`` is spent, or the ``abort`` event is set; any other
4xx raises at once.
"""

from __future__ import annotations

import email.message
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from . import __version__
from .backoff import Backoff
from .models import FileEntry, HeartbeatAnswer, Inventory, JobRef, RegisterAnswer, WorkAnswer

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1/agent"


class ApiError(Exception):
    """A 4xx answer (or 5xx once retries are spent); ``status`` is the HTTP code."""

    def __init__(self, status: int, body: Any, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.body = body
        detail = body.get("detail") if isinstance(body, dict) else None
        self.detail = str(detail if detail is not None else body)[:500]
        super().__init__(f"{method} {url}: HTTP {status}: {self.detail}")


class StaleAttempt(ApiError):
    """409 "stale attempt" (or 404) on a job call: the server no longer runs
    this attempt on this node."""


class OffsetMismatch(ApiError):
    """409 on a bundle chunk: the server holds ``received_bytes``, not our offset."""

    def __init__(self, status: int, body: Any, **kw: Any) -> None:
        super().__init__(status, body, **kw)
        self.received_bytes = int(body["received_bytes"])


class Aborted(Exception):
    """The call was given up because its ``abort`` event was set."""


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:500]


class ApiClient:
    """The agent's side of the protocol.

    ``server`` is the site's base URL (``https://e31.example``); ``stop`` is
    the agent-wide event that ends every retry loop at shutdown (used when a
    call passes no ``abort`` of its own).
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

    # -- transport ---------------------------------------------------------

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

        ``max_tries`` None retries for ever. ``job_call`` marks the per-job
        calls, where a 409 without ``received_bytes`` (and a 404) mean
        "stale attempt" and raise :class:`StaleAttempt`.
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
                    return _body(response) if response.content else {}
                body = _body(response)
                if status == 409 and isinstance(body, dict) and "received_bytes" in body:
                    raise OffsetMismatch(status, body, method=method, url=url)
                if job_call and _is_stale(status, body):
                    raise StaleAttempt(status, body, method=method, url=url)
                if 400 <= status < 500 and status != 429:
                    raise ApiError(status, body, method=method, url=url)
                if max_tries is not None and tries >= max_tries:
                    raise ApiError(status, body, method=method, url=url)
                problem = f"HTTP {status}"
                if status == 429:
                    delay = _retry_after(response)
            if delay is None:
                delay = backoff.next()
            log.warning("%s %s failed (%s); retrying in %.1f s", method, url, problem, delay)
            if abort.wait(delay):
                raise Aborted(f"{method} {url}")

    # -- node --------------------------------------------------------------

    def register(
        self, inventory: Inventory, *, abort: threading.Event | None = None
    ) -> RegisterAnswer:
        """``POST register/``: announce the node and its hardware."""
        data = self.request("POST", "/register/", json=inventory.to_json(), abort=abort)
        return RegisterAnswer.from_json(data)

    def heartbeat(self, running: list[JobRef], *, health: dict[str, Any] | None = None) -> HeartbeatAnswer:
        """``POST heartbeat/`` once (no retry: the next beat is the retry).

        ``health`` (GPU health, see :func:`e31_agent.inventory.gpu_health`) is
        sent when given. Returns the attempts the server wants cancelled and
        the node's state there (``down``: register again).
        """
        body: dict[str, Any] = {"running": [r.to_json() for r in running]}
        if health is not None:
            body["health"] = health
        data = self.request("POST", "/heartbeat/", json=body, max_tries=1)
        return HeartbeatAnswer.from_json(data)

    def work(
        self,
        wait_s: float,
        *,
        have: list[JobRef] | None = None,
        abort: threading.Event | None = None,
    ) -> WorkAnswer:
        """``GET work/?wait=`` long poll; ``wait_s`` is clamped to 0..30 s.

        ``have``: the attempts this agent already holds (``?have=12.1,13.1``, protocol v2):
        their assignments, repeated until the server hears of them, do not make the poll
        answer at once.
        """
        wait = max(0, min(30, int(wait_s)))
        params: dict[str, Any] = {"wait": wait}
        if have:
            params["have"] = ",".join(f"{r.job_id}.{r.attempt}" for r in have)
        data = self.request(
            "GET", "/work/", params=params, timeout_s=wait + 15.0, abort=abort
        )
        return WorkAnswer.from_json(data)

    # -- jobs --------------------------------------------------------------

    def report(
        self, job_id: int, body: dict[str, Any], *, abort: threading.Event | None = None
    ) -> dict[str, Any]:
        """``POST jobs/<id>/report/`` with ``attempt``, ``seq``, ``type``, ...

        Safe to retry: the server applies each seq once.
        """
        return self.request(
            "POST", f"/jobs/{job_id}/report/", json=body, abort=abort, job_call=True
        )

    def report_batch(
        self,
        items: list[dict[str, Any]],
        *,
        abort: threading.Event | None = None,
        max_tries: int | None = None,
    ) -> list[dict[str, Any]]:
        """``POST reports/`` (protocol v2): several reports, each with its ``job_id``, in one call.

        Returns the server's answer for each item, in order (``status`` 200, 400,
        404, 409, 5xx; see docs/agent-protocol.md). Safe to retry as a whole.
        Raises :class:`ApiError` 404 from a server without the call.
        """
        data = self.request("POST", "/reports/", json={"reports": items}, abort=abort, max_tries=max_tries)
        results = data.get("results") if isinstance(data, dict) else None
        return results if isinstance(results, list) else []

    def log_chunk(
        self,
        job_id: int,
        attempt: int,
        offset: int,
        chunk: bytes,
        *,
        abort: threading.Event | None = None,
    ) -> int:
        """``POST jobs/<id>/log/``: bytes at ``offset`` of the log; returns bytes stored."""
        data = self.request(
            "POST",
            f"/jobs/{job_id}/log/",
            params={"attempt": attempt, "offset": offset},
            content=chunk,
            headers={"Content-Type": "application/octet-stream"},
            abort=abort,
            job_call=True,
        )
        return int(data.get("size", offset + len(chunk)))

    # -- bundle ------------------------------------------------------------

    def bundle_received(
        self, job_id: int, attempt: int, *, abort: threading.Event | None = None
    ) -> int:
        """``GET jobs/<id>/bundle/``: how many bytes of the bundle the server has."""
        data = self.request(
            "GET",
            f"/jobs/{job_id}/bundle/",
            params={"attempt": attempt},
            abort=abort,
            job_call=True,
        )
        return int(data.get("received_bytes", 0))

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

        Raises :class:`OffsetMismatch` when the server holds another offset and
        :class:`ApiError` (400) when the chunk's checksum did not match.
        """
        data = self.request(
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
    ) -> dict[str, Any]:
        """``POST jobs/<id>/bundle/complete/``: the server verifies size and checksum."""
        return self.request(
            "POST",
            f"/jobs/{job_id}/bundle/complete/",
            params={"attempt": attempt},
            json={
                "size_bytes": size_bytes,
                "sha256": sha256,
                "files": [f.to_json() for f in files],
            },
            timeout_s=120.0,
            abort=abort,
            job_call=True,
        )

    # -- pre-staging ---------------------------------------------------------

    def prestage_report(self, jobs: list[dict[str, Any]], *, abort: threading.Event | None = None) -> list[int]:
        """``POST prestage/``: progress of queued jobs' inputs fetched ahead, meter off.

        ``jobs``: ``[{"job_id", "state", "bytes_done", "bytes_total", "message"}]``.
        Informational, so tried 3 times at most. Returns the job ids the server
        still wants pre-staged here.
        """
        data = self.request("POST", "/prestage/", json={"jobs": jobs}, abort=abort, max_tries=3)
        return [int(j) for j in data.get("prestage") or []]

    # -- uploads -----------------------------------------------------------

    @contextmanager
    def open_upload(
        self, upload_id: str, *, abort: threading.Event | None = None, max_tries: int = 5
    ) -> Iterator[tuple[httpx.Response, str | None]]:
        """Stream ``GET uploads/<id>/``; yields the response and its file name.

        The file name comes from ``Content-Disposition`` when the server sends
        one. Only connecting is retried here; the caller retries a transfer
        that breaks half way.
        """
        abort = abort or self.stop
        url = f"{API_PREFIX}/uploads/{upload_id}/"
        backoff = self._backoff()
        tries = 0
        while True:
            tries += 1
            try:
                response = self._http.send(self._http.build_request("GET", url), stream=True)
            except httpx.TransportError:
                if tries >= max_tries:
                    raise
            else:
                if response.status_code < 300:
                    break
                response.read()
                body = _body(response)
                response.close()
                if (
                    400 <= response.status_code < 500 and response.status_code != 429
                ) or tries >= max_tries:
                    raise ApiError(response.status_code, body, method="GET", url=url)
            if abort.wait(backoff.next()):
                raise Aborted(f"GET {url}")
        try:
            yield response, _filename(response.headers.get("Content-Disposition"))
        finally:
            response.close()


def _is_stale(status: int, body: Any) -> bool:
    """404 (not this node's attempt) or 409 ``{"detail": "stale attempt"}``.

    Other 409s (a log offset the server cannot take) are plain errors.
    """
    if status == 404:
        return True
    detail = body.get("detail") if isinstance(body, dict) else body
    return status == 409 and "stale" in str(detail).lower()


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (capped at 60)."""
    value = response.headers.get("Retry-After", "")
    try:
        return min(60.0, max(0.0, float(value)))
    except ValueError:
        return None


def _filename(disposition: str | None) -> str | None:
    """The ``filename`` parameter of a Content-Disposition header, if any."""
    if not disposition:
        return None
    msg = email.message.Message()
    msg["Content-Disposition"] = disposition
    name = msg.get_filename()
    return name or None
