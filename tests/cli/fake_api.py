"""An in-process stand-in for the API, for CLI tests without a server: each route a function of the
request, answered through httpx's ``MockTransport`` by the real :class:`e31_cli.client.Api`."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import yaml
from e31_cli import context
from e31_cli.client import Api

Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeApi:
    """Routes by ``(method, path under /api/v1)``; every request is kept in ``calls``."""

    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    calls: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, handler: Handler | None = None, *, status: int = 200,
           body: object = None) -> None:
        """Answer ``method path`` with ``handler(request)``, else with ``status`` and JSON ``body``."""
        self.routes[(method, path)] = handler or (lambda _request: json_response(status, body))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        path = request.url.path.removeprefix("/api/v1")
        handler = self.routes.get((request.method, path))
        if handler is None:
            return json_response(404, {"detail": "Not found."})
        return handler(request)

    def install(self, monkeypatch) -> None:
        """Make every command's ``ctx.api()`` talk to this fake (URL and token from the environment)."""
        monkeypatch.setenv("E31_URL", "http://fake.test")
        monkeypatch.setenv("E31_TOKEN", "0123456789abcdef0123456789abcdef01234567")
        monkeypatch.setattr(context, "Api", lambda settings: Api(settings, transport=httpx.MockTransport(self)))


def json_response(status: int, body: object = None) -> httpx.Response:
    return httpx.Response(status, content=b"" if body is None else json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})



def submitted_spec(request: httpx.Request) -> Any:
    """The ``spec`` field of a submit (``POST /jobs/``), parsed: a multipart part when files are
    attached, else a urlencoded form field."""
    content_type = request.headers["Content-Type"]
    if content_type.startswith("application/x-www-form-urlencoded"):
        return yaml.safe_load(parse_qs(request.content.decode())["spec"][0])
    boundary = content_type.split("boundary=")[1].encode()
    for part in request.content.split(b"--" + boundary):
        head, _, body = part.partition(b"\r\n\r\n")
        if b'name="spec"' in head:
            return yaml.safe_load(body.rsplit(b"\r\n", 1)[0].decode())
    raise AssertionError("the submit has no spec")
