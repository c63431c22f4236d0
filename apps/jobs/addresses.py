"""Data sources that name a non-public address outright (SPEC §2, issue 11).

At submit, a ``data[i].source`` such as ``https://127.0.0.1:5432/`` or
``https://169.254.169.254/latest/meta-data/`` is refused with a 400 on that
field: the agent would refuse it anyway (``e31_agent.netguard`` checks what
every host resolves to, on every redirect), and the user learns it at once.
Host *names* are not resolved here (the agent's network is not the server's);
``localhost`` and ``*.localhost`` are treated as loopback (RFC 6761).
The operator may allow hosts or networks with ``E31_DATA_ALLOW_HOSTS``.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

SHARED = ipaddress.ip_network("100.64.0.0/10")


def _literal_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an address when it is one, in any form a resolver takes (``127.1``, ``0x7f.0.0.1``,
    ``2130706433``, ``[::1]``), else None."""
    host = host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefxABCDEFX." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))  # the shorthand forms inet_aton accepts
        except OSError:
            return None
    return None


def address_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What kind of non-public address ``ip`` is, or None when public (as the agent's netguard)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, test in (("loopback", ip.is_loopback), ("unspecified", ip.is_unspecified),
                       ("link-local (cloud metadata)", ip.is_link_local), ("multicast", ip.is_multicast),
                       ("shared (100.64.0.0/10)", isinstance(ip, ipaddress.IPv4Address) and ip in SHARED),
                       ("private", ip.is_private), ("reserved", ip.is_reserved or not ip.is_global)):
        if test:
            return kind
    return None


def _allowed(host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    for entry in getattr(settings, "E31_DATA_ALLOW_HOSTS", []):
        entry = entry.strip().lower()
        if entry == host:
            return True
        if ip is not None:
            try:
                if ip in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
            except ValueError:
                continue
    return False


def source_address_problem(source: str) -> str | None:
    """Why ``source`` (an ``https://`` URL) names a refused address, or None."""
    try:
        host = (urlsplit(source).hostname or "").lower().rstrip(".")
    except ValueError:
        return "is not a valid URL"
    if not host:
        return "must name a host"
    ip = _literal_ip(host)
    if ip is not None:
        kind = address_kind(ip)
    elif host == "localhost" or host.endswith(".localhost"):
        kind = "loopback"
    else:
        return None
    if kind is None or _allowed(host, ip):
        return None
    return (f"names a {kind} address ({host}); data is fetched only from public addresses"
            " (the operator may allow more with E31_DATA_ALLOW_HOSTS)")
