"""A webhook's URL: HTTPS only, to public addresses only (SSRF), checked at registration and at each try.

The addresses are judged by the data sources' rule (:func:`apps.jobs.addresses.address_kind`: loopback,
private, link-local with the cloud metadata endpoint, shared 100.64.0.0/10, multicast, unspecified and
reserved are refused, IPv4-mapped IPv6 by their IPv4 address). Unlike a data source's host, a webhook's
host *name* is resolved here, since the server itself connects: every address it resolves to must be
public, and the connection is then made to the address checked (the URL's host replaced by it; ``Host``
and the TLS name stay the original), so a DNS answer that changes between the check and the connect (DNS
rebinding) cannot move it. ``localhost`` and ``*.localhost`` are loopback (RFC 6761).

``E31_WEBHOOK_ALLOW_HOSTS`` lists ``host:port`` endpoints allowed despite the rule (a receiver on the
operator's own network; the tests' loopback receiver).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from apps.jobs.addresses import address_kind

URL_MAX = 2000


class UrlRefused(Exception):
    """The URL is not one a webhook may call; the message says why, in a user's words."""


@dataclass(frozen=True)
class Target:
    """Where a try connects: ``url`` names the checked address, ``host_header`` and ``sni`` the original
    host (``sni`` None when the URL names an address)."""

    url: str
    host_header: str
    sni: str | None


def _resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order, deduplicated (tests replace this).

    Raises:
        UrlRefused: it does not resolve.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"the host {host} does not resolve ({exc})") from None
    return list(dict.fromkeys(info[4][0].split("%")[0] for info in infos))


def _literal(host: str) -> str | None:
    """``host`` as an address when it is one, in any form a resolver takes (``127.1``, ``0x7f.0.0.1``,
    ``2130706433``, ``::1``), else None."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if all(c in "0123456789abcdefxABCDEFX." for c in host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))  # the shorthand forms inet_aton accepts
        except OSError:
            return None
    return None


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_endpoint(host: str, port: int) -> bool:
    """True when ``host:port`` is in ``E31_WEBHOOK_ALLOW_HOSTS`` (case-insensitive, IPv6 in brackets)."""
    want = _endpoint(host.lower(), port)
    return any(entry.strip().lower() == want for entry in settings.E31_WEBHOOK_ALLOW_HOSTS)


def _parts(url: object) -> tuple[str, int]:
    """``(host, port)`` of an acceptable-looking ``url``; raises :class:`UrlRefused`."""
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused("an https:// URL is required")
    if len(url) > URL_MAX:
        raise UrlRefused(f"at most {URL_MAX} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise UrlRefused("a URL holds no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port or 443
    except ValueError:
        raise UrlRefused("not a valid URL") from None
    if parts.scheme.lower() != "https":
        raise UrlRefused("only https:// URLs are called")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("a URL holds no user name or password (sign with the webhook's secret instead)")
    if parts.fragment:
        raise UrlRefused("a URL has no #fragment")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UrlRefused("the URL names no host")
    return host, port


def _check_addresses(host: str, port: int) -> str:
    """The first address of ``host`` once every one is public (or ``host:port`` is allowed).

    Raises:
        UrlRefused: it does not resolve, or resolves to a non-public address.
    """
    if host == "localhost" or host.endswith(".localhost"):
        addresses = ["127.0.0.1"]
    else:
        literal = _literal(host)
        addresses = [literal] if literal else _resolve(host, port)
    if not addresses:
        raise UrlRefused(f"the host {host} resolves to no address")
    if allowed_endpoint(host, port):
        return addresses[0]
    for address in addresses:
        kind = address_kind(ipaddress.ip_address(address))
        if kind is not None:
            shown = host if address == host else f"{host} ({address})"
            raise UrlRefused(f"{shown} is a {kind} address; webhooks call only public addresses "
                             "(the operator may allow an endpoint with E31_WEBHOOK_ALLOW_HOSTS)")
    return addresses[0]


def url_problem(url: object) -> str | None:
    """Why ``url`` may not be a webhook's URL (the words for a 400 on ``url``), or None.

    Resolves the host (a blocking DNS lookup, the resolver's own timeout) unless it is an address.
    """
    try:
        host, port = _parts(url)
        _check_addresses(host, port)
    except UrlRefused as exc:
        return str(exc)
    return None


def target(url: str) -> Target:
    """Where a try of ``url`` connects, the host resolved and checked now (module docstring).

    Raises:
        UrlRefused: the URL or an address it resolves to is refused (the try fails; it is retried
            as any failure is, since a DNS answer may change back).
    """
    host, port = _parts(url)
    address = _check_addresses(host, port)
    parts = urlsplit(url)
    pinned = f"[{address}]" if ":" in address else address
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == 443 else f"{shown}:{port}"
    pinned_url = urlunsplit(("https", f"{pinned}:{port}", parts.path or "/", parts.query, ""))
    sni = None if _literal(host) else host  # an address: the certificate must name it; no SNI is sent
    return Target(pinned_url, host_header, sni)
