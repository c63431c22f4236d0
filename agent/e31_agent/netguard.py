"""Fetching ``http(s)://`` inputs without reaching inside the node's network (SSRF).

A job's spec names any URL; fetched naively, ``https://127.0.0.1:5432/`` or
``http://169.254.169.254/latest/meta-data/`` would make the agent talk to the
host's own services or the cloud's metadata endpoint, and a public URL could
redirect there. Here every hop (the first request and each redirect, followed
by hand, at most :data:`MAX_REDIRECTS`) is checked before it is made:

* the scheme is ``http`` or ``https``, and never ``https`` -> ``http``;
* the host is resolved and *every* address it resolves to must be public:
  loopback, private (RFC 1918, ULA), link-local (cloud metadata
  169.254.169.254 among them), shared (100.64.0.0/10, RFC 6598), multicast,
  unspecified and reserved addresses are refused, IPv4-mapped IPv6 ones
  (``::ffff:127.0.0.1``) by their IPv4 address;
* the connection is then made to the address that was checked (the URL's
  host is replaced by it; ``Host`` and TLS SNI/certificate name stay the
  original name), so a DNS answer that changes between check and connect
  (DNS rebinding) cannot move it.

The operator may allow hosts or networks (``--allow-host NAME|IP|CIDR``,
``$E31_AGENT_ALLOW_HOSTS``), e.g. a data server on the private network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

MAX_REDIRECTS = 10
DEFAULT_PORT = {"http": 80, "https": 443}
REDIRECTS = (301, 302, 303, 307, 308)
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT; Alibaba's metadata is 100.100.100.200
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddress(Exception):
    """A URL (or a redirect) leads to an address the node must not fetch from; the message says why."""


def address_problem(ip: IPAddress) -> str | None:
    """What kind of non-public address ``ip`` is ("loopback", "private", ...), or None when public."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local (cloud metadata)" if str(ip) == "169.254.169.254" else "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in SHARED:
        return "shared (100.64.0.0/10)"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Which hosts and networks the operator allows besides public addresses.

    ``allow``: host names (exact, case-insensitive), addresses or CIDRs.
    ``resolve``: ``socket.getaddrinfo``-like (tests pass a fake one).
    """

    allow: tuple[str, ...] = ()
    resolve: Any = socket.getaddrinfo

    @classmethod
    def parse(cls, entries: list[str] | tuple[str, ...]) -> AddressPolicy:
        """Raises ``ValueError`` for an entry that is neither a host name nor an address/CIDR."""
        for entry in entries:
            if not entry.strip() or " " in entry.strip():
                raise ValueError(f"{entry!r}: not a host name, address or CIDR")
            if "/" in entry:
                ipaddress.ip_network(entry.strip(), strict=False)
        return cls(tuple(e.strip().lower() for e in entries))

    def _networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        nets = []
        for entry in self.allow:
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        return nets

    def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host``; raises :class:`BlockedAddress`."""
        name = host.lower().strip("[]").rstrip(".")
        try:
            infos = self.resolve(name, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise BlockedAddress(f"{host}: cannot resolve: {exc}") from None
        addresses = list(dict.fromkeys(info[4][0].split("%")[0] for info in infos))
        if not addresses:
            raise BlockedAddress(f"{host}: resolves to no address")
        if name in self.allow:
            return addresses[0]
        nets = self._networks()
        for address in addresses:
            ip = ipaddress.ip_address(address)
            problem = address_problem(ip)
            if problem and not any(ip in net or (getattr(ip, "ipv4_mapped", None) or ip) in net for net in nets):
                shown = host if address == name else f"{host} ({address})"
                raise BlockedAddress(f"{shown} is a {problem} address; the node fetches only from public "
                                     "addresses (its operator may allow more with --allow-host)")
        return addresses[0]


def _pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any], tuple[str, str] | None]:
    """``url`` with its host replaced by ``address``; the Host header, TLS extensions and basic auth."""
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORT[parts.scheme]
    ip_host = f"[{address}]" if ":" in address else address
    target = urlunsplit((parts.scheme, f"{ip_host}:{port}", parts.path or "/", parts.query, ""))
    host = parts.hostname or ""
    shown_host = f"[{host}]" if ":" in host else host
    headers = {"Host": shown_host if parts.port in (None, DEFAULT_PORT[parts.scheme]) else f"{shown_host}:{port}"}
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    auth = (parts.username or "", parts.password or "") if parts.username else None
    return target, headers, extensions, auth


@contextlib.contextmanager
def guarded_request(url: str, policy: AddressPolicy, *, method: str = "GET", timeout: float = 60.0,
                    client: httpx.Client | None = None) -> Iterator[httpx.Response]:
    """A streamed response of ``url`` after following redirects, each hop checked (module docstring).

    Raises:
        BlockedAddress: a hop leads to a refused address or scheme, or too many redirects.
        httpx.HTTPError: network trouble (the caller retries).
    """
    own = client is None
    client = client or httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)
    try:
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            parts = urlsplit(current)
            if parts.scheme not in DEFAULT_PORT or not parts.hostname:
                raise BlockedAddress(f"{current}: only http:// and https:// URLs with a host are fetched")
            address = policy.check(parts.hostname, parts.port or DEFAULT_PORT[parts.scheme])
            target, headers, extensions, auth = _pinned(current, address)
            request = client.build_request(method, target, headers=headers, extensions=extensions)
            response = client.send(request, stream=True, auth=auth, follow_redirects=False)
            if response.status_code in REDIRECTS and "location" in response.headers:
                response.close()
                following = urljoin(current, response.headers["location"])
                if parts.scheme == "https" and urlsplit(following).scheme != "https":
                    raise BlockedAddress(f"{current}: redirect from https to {following} refused (a downgrade)")
                current = following
                continue
            try:
                yield response
            finally:
                response.close()
            return
        raise BlockedAddress(f"{url}: more than {MAX_REDIRECTS} redirects")
    finally:
        if own:
            client.close()


def guarded_info(url: str, policy: AddressPolicy, *, timeout: float = 30.0) -> dict[str, Any]:
    """What a ``HEAD`` says of ``url`` in fsspec's ``info()`` shape: ``{"type", "size", "ETag"...}``.

    Raises :class:`BlockedAddress`, ``FileNotFoundError`` (404/410) or ``httpx.HTTPError``.
    """
    for method in ("HEAD", "GET"):  # GET (headers only, the body is not read) where HEAD is not served
        with guarded_request(url, policy, method=method, timeout=timeout) as resp:
            if resp.status_code in (404, 410):
                raise FileNotFoundError(url)
            if method == "HEAD" and resp.status_code in (400, 403, 405, 501):
                continue
            resp.raise_for_status()
            length = resp.headers.get("Content-Length", "")
            info: dict[str, Any] = {"type": "file", "size": int(length) if length.isdigit() else None}
            for name in ("ETag", "Last-Modified"):
                if resp.headers.get(name):
                    info[name] = resp.headers[name]
            return info
    raise AssertionError("unreachable")
