"""Request bodies bounded before Django reads them (issue 11, docs/deploy.md "Request bodies").

Django's ASGI handler reads the *whole* body (into a file spooled to disk past
``FILE_UPLOAD_MAX_MEMORY_SIZE``) before any view or authentication runs. This
ASGI middleware sits in front of it:

* a ``Content-Length`` past the path's cap is answered 413 at once, without
  reading the body; a body that grows past it while being read (chunked, or a
  length that lied) is cut off and answered 413;
* a body larger than ``E31_ANON_BODY_MAX_BYTES`` (default 64 KiB: a sign-in
  form fits) from a caller without a valid API token, node token or signed-in
  session is answered 401 (API, ``WWW-Authenticate: Token``) or 403 (pages)
  without reading it. Django still authenticates the request afterwards as
  always; this is only the early refusal.

Caps: ``E31_UPLOAD_MAX_BYTES`` + 1 MiB on the paths that take files
(``/api/v1/uploads/``, ``/jobs/new/``); elsewhere ``DATA_UPLOAD_MAX_MEMORY_SIZE``
+ 1 MiB (a bundle chunk is at most 32 MiB).
"""
from __future__ import annotations

import json
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from apps.pool.services import node_for_token
from apps.tokens.services import token_user

FILE_PATHS = ("/api/v1/uploads/", "/jobs/new/")
SLACK = 1 << 20  # multipart framing, form fields
BODYLESS = {"GET", "HEAD", "OPTIONS", "TRACE"}


def body_cap(path: str) -> int:
    """Largest body, bytes, a request to ``path`` may carry."""
    if path in FILE_PATHS:
        return settings.E31_UPLOAD_MAX_BYTES + SLACK
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE + SLACK


def caller_known(headers: dict[bytes, bytes]) -> bool:
    """Whether the request carries a valid API token, node token or signed-in session (DB reads)."""
    auth = headers.get(b"authorization", b"").decode("latin1")
    scheme, _, credential = auth.partition(" ")
    credential = credential.strip()
    if scheme == "Token" and credential:
        return token_user(credential) is not None
    if scheme == "Node" and credential:
        return node_for_token(credential) is not None
    cookies = headers.get(b"cookie", b"").decode("latin1")
    for part in cookies.split(";"):
        name, _, value = part.strip().partition("=")
        if name == settings.SESSION_COOKIE_NAME and value:
            store = import_module(settings.SESSION_ENGINE).SessionStore(value)
            try:
                return "_auth_user_id" in store.load()
            except Exception:
                return False
    return False


def _caller_known_closing(headers: dict[bytes, bytes]) -> bool:
    """:func:`caller_known`, then the thread's database connection back to the pool (this runs
    outside any request, so Django's end-of-request hook would never close it)."""
    try:
        return caller_known(headers)
    finally:
        connections.close_all()


async def _reply(send, status: int, detail: str, *, api: bool) -> None:
    body = json.dumps({"detail": detail}).encode() if api else (detail + "\n").encode()
    headers = [(b"content-type", b"application/json" if api else b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if status == 401:
        headers.append((b"www-authenticate", b"Token"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """ASGI middleware of the module docstring, around the HTTP application."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in BODYLESS:
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        api = path.startswith("/api/")
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), value)
        raw_length = headers.get(b"content-length")
        length = None
        if raw_length is not None:
            if not raw_length.strip().isdigit():
                return await _reply(send, 400, "Content-Length must be a number of bytes", api=api)
            length = int(raw_length)
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if length is None and not chunked:
            length = 0
        cap = body_cap(path)
        anon_max = settings.E31_ANON_BODY_MAX_BYTES
        if (length is None or length > anon_max) and not await sync_to_async(_caller_known_closing)(headers):
            if api:
                return await _reply(send, 401, "Authentication credentials were not provided.", api=True)
            return await _reply(send, 403, "sign in first", api=False)
        if length is not None and length > cap:
            return await _reply(send, 413, f"the body is {length} bytes; the most {path} takes is {cap}", api=api)
        state = {"read": 0, "over": False, "started": False}

        async def bounded_receive():
            if state["over"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > cap:
                    state["over"] = True
                    return {"type": "http.disconnect"}  # Django stops reading (RequestAborted)
            return message

        async def watched_send(message):
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, bounded_receive, watched_send)
        if state["over"] and not state["started"]:
            await _reply(send, 413, f"the body is over {cap} bytes, the most {path} takes", api=api)
