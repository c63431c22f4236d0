"""The WebSocket origin check, port included (issue 11).

Channels' ``AllowedHostsOriginValidator`` compares only the Origin's host name
with ``ALLOWED_HOSTS``: a page served by anything else on the same host (say
``http://127.0.0.1:9999``) could open the live sockets with the user's cookie.
Here an Origin is accepted only when its scheme is http(s) and its host *and
port* equal those of the request's ``Host`` header (the browser's same-origin
rule), that host being in ``ALLOWED_HOSTS``, or when it is exactly one of
``CSRF_TRUSTED_ORIGINS`` (scheme, host and port). No Origin: refused.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORT = {"http": 80, "https": 443}


def _origin_key(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an Origin such as ``https://e31.example.com:8443``, or None."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORT or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORT[parts.scheme]


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Whether a WebSocket handshake with ``Origin: origin`` and ``Host: host`` may go on."""
    key = _origin_key(origin or "")
    if key is None:
        return False
    if any(_origin_key(trusted) == key for trusted in settings.CSRF_TRUSTED_ORIGINS):
        return True
    if not host:
        return False
    domain, port = split_domain_port(host.lower())
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    scheme, origin_host, origin_port = key
    host_port = int(port) if port.isdigit() else DEFAULT_PORT[scheme]
    return origin_host.strip("[]") == domain.strip("[]") and origin_port == host_port


class SameOriginValidator:
    """ASGI middleware: pass a WebSocket on only when :func:`origin_allowed`, else close it."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin1") or None
        host = headers.get(b"host", b"").decode("latin1") or None
        if origin_allowed(origin, host):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
