"""A thin client for the E31 REST API (``/api/v1/``, token auth): every failure becomes a
:class:`~e31_cli.errors.CliError` with the right exit code, never an exception from httpx."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx

from . import __version__
from .config import Settings
from .errors import CliError, Exit
from .specfile import SpecFile

TIMEOUT_S = 30.0  # seconds per request (connect, read, write): a long upload still streams


def flatten_errors(body: Any, prefix: str = "") -> dict[str, list[str]]:
    """An API error body as ``{"field.path": ["message", ...]}``.

    The API answers ``{"field.path": ["message"]}`` (SPEC §2); DRF's own errors may nest
    (``{"data": [{"source": [...]}]}``) or be ``{"detail": "..."}`` (kept as ``detail``).
    """
    out: dict[str, list[str]] = {}
    if isinstance(body, dict):
        for key, value in body.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten_errors(value, path))
    elif isinstance(body, list) and body and all(isinstance(v, str | int | float) for v in body):
        out[prefix or "detail"] = [str(v) for v in body]
    elif isinstance(body, list):
        for i, value in enumerate(body):
            out.update(flatten_errors(value, f"{prefix}[{i}]"))
    elif body is not None:
        out[prefix or "detail"] = [str(body)]
    return out


def error_from(resp: httpx.Response) -> CliError:
    """The :class:`CliError` for an HTTP error answer (exit code by status)."""
    status = resp.status_code
    try:
        body = resp.json()
    except ValueError:
        body = None
    fields = flatten_errors(body) if isinstance(body, dict | list) else {}
    detail = " ".join(fields.pop("detail", [])).rstrip(".") if "detail" in fields else ""
    if status in (401, 403):
        hint = " Check the token: `e31 login`, or E31_TOKEN." if status == 401 else ""
        return CliError(f"{detail or 'not allowed'} (HTTP {status}).{hint}", Exit.AUTH, fields=fields, status=status)
    if status == 404:
        path = resp.request.url.path if resp.request is not None else ""
        return CliError(f"not found: {path} (no such job, or not yours)", Exit.NOT_FOUND, status=status)
    if status >= 500:
        return CliError(f"the server failed (HTTP {status}); try again later", Exit.SERVER, status=status)
    if fields:
        return CliError(detail or f"the server refused the request (HTTP {status})", Exit.INVALID,
                        fields=fields, status=status)
    text = resp.text.strip()[:200] if body is None else ""
    return CliError(detail or f"the server refused the request (HTTP {status}){': ' + text if text else ''}",
                    Exit.INVALID, status=status)


@contextlib.contextmanager
def network_errors(url: str) -> Iterator[None]:
    """Turn httpx's transport errors into :class:`CliError` (exit 7, or 2 for a bad URL)."""
    try:
        yield
    except httpx.TimeoutException:
        raise CliError(f"{url} did not answer within {TIMEOUT_S:.0f} s", Exit.NETWORK) from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise CliError(f"bad server URL {url!r}: {exc}", Exit.USAGE) from None
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise CliError(f"cannot reach {url}: {reason}", Exit.NETWORK) from None


class Api:
    """The API at ``settings.url`` as ``settings.token``.

    Methods return the decoded JSON (or the :class:`httpx.Response` for text and files) and
    raise :class:`CliError` for every HTTP and network failure.
    """

    def __init__(self, settings: Settings, *, timeout: float = TIMEOUT_S, transport: httpx.BaseTransport | None = None):
        self.url = settings.url
        self.http = httpx.Client(
            base_url=settings.url + "/api/v1", timeout=timeout, transport=transport,
            headers={"Authorization": f"Token {settings.token}", "User-Agent": f"e31-cli/{__version__}",
                     "Accept": "application/json"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; the response when its status is 2xx.

        Raises:
            CliError: HTTP error (exit 4, 5, 6 or 8) or network error (exit 7).
        """
        with network_errors(self.url):
            resp = self.http.request(method, path, **kwargs)
        if resp.status_code >= 400:
            raise error_from(resp)
        return resp

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call's JSON body.

        Raises:
            CliError: as :meth:`request`, or exit 8 when the body is not JSON (not the E31 API).
        """
        resp = self.request(method, path, **kwargs)
        try:
            return resp.json()
        except ValueError:
            raise CliError(f"{self.url} answered something that is not the E31 API (not JSON)",
                           Exit.SERVER, status=resp.status_code) from None

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """A streamed call (downloads); the error body is read before raising."""
        with network_errors(self.url), self.http.stream(method, path, **kwargs) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise error_from(resp)
            yield resp

    # --- the calls the commands make ------------------------------------------------------
    def job(self, job_id: int) -> dict[str, Any]:
        """``GET /jobs/{id}/``."""
        return self.json("GET", f"/jobs/{job_id}/")

    def jobs(self, *, state: str | None = None, limit: int | None = 50,
             project: str | None = None) -> list[dict[str, Any]]:
        """My jobs (``project``: every job of that project, all members'), newest first, following
        pages up to ``limit`` (None: all)."""
        params: dict[str, Any] = {"state": state} if state else {}
        if project:
            params["project"] = project
        out: list[dict[str, Any]] = []
        page = self.json("GET", "/jobs/", params=params)
        while True:
            out.extend(page.get("results", []))
            if not page.get("next") or (limit is not None and len(out) >= limit):
                break
            page = self.json("GET", page["next"])
        return out[:limit] if limit is not None else out

    def events(self, job_id: int) -> list[dict[str, Any]]:
        """``GET /jobs/{id}/events/``: the timeline, oldest first."""
        return self.json("GET", f"/jobs/{job_id}/events/")

    def log(self, job_id: int, offset: int, attempt: int | None = None,
            stream: str | None = None, rank: int = 0) -> tuple[bytes, int]:
        """Log bytes of ``job_id`` from byte ``offset``, and the next offset (``stream``:
        "stdout"/"stderr" keeps that stream's bytes only; the next offset still moves over both).
        ``rank``: the node rank of a multi-node job (each has its own log; default 0)."""
        params: dict[str, Any] = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        if stream:
            params["stream"] = stream
        if rank:
            params["rank"] = rank
        resp = self.request("GET", f"/jobs/{job_id}/logs/", params=params)
        return resp.content, int(resp.headers.get("X-Next-Offset", offset + len(resp.content)))

    def submit(self, spec: SpecFile, *, dry_run: bool = False) -> dict[str, Any]:
        """``POST /jobs/`` as multipart: the spec's text and its ``upload:`` files (``dry_run``:
        ``?dry_run=1``, the files as empty parts that carry only their names). The answer: the job,
        an array (``array_id``, ``job_ids``) or, for a dry run, the quote.

        Raises:
            CliError: as :meth:`request` (400: the spec's errors field by field).
        """
        files: list[tuple[str, Any]] = [
            ("files", (name, b"" if dry_run else path.open("rb"), "application/octet-stream"))
            for name, path in spec.attachments]
        try:
            return self.json("POST", "/jobs/", params={"dry_run": "1"} if dry_run else None,
                             data={"spec": spec.text}, files=files or None)
        finally:
            for _field, (_name, fh, _type) in files:
                if hasattr(fh, "close"):
                    fh.close()
