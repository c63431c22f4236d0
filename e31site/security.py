"""Response headers of the site's security policy (issue 11).

Django 5.2 has no built-in Content-Security-Policy, so this small middleware
sets one: scripts only from this site (no inline script, no ``eval``), styles
from this site (inline ``style=""`` attributes allowed: the usage bars are
sized with them, and htmx adds its indicator style), WebSockets only to this
host, no plugins, no framing, forms posting only here.
"""
from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


def content_security_policy(request: HttpRequest) -> str:
    """The CSP header value for ``request`` (its ``connect-src`` names this host's ws:/wss:)."""
    try:
        host = request.get_host()
    except Exception:  # DisallowedHost: the response is an error page anyway
        host = ""
    sockets = f" ws://{host} wss://{host}" if host else ""
    return "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        f"connect-src 'self'{sockets}",
        "object-src 'none'",
        "base-uri 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ])


class ContentSecurityPolicyMiddleware:
    """Adds ``Content-Security-Policy`` to every response that has none yet."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", content_security_policy(request))
        return response
