"""The signature of a delivery (SPEC "Webhooks"), after Stripe's and Standard Webhooks' schemes.

``E31-Webhook-Signature: v1=<hex>``, the hex HMAC-SHA256, keyed with the webhook's secret (its UTF-8
bytes, ``whsec_`` prefix and all), of ``f"{timestamp}.{body}"``: ``timestamp`` is
``E31-Webhook-Timestamp`` (unix seconds, as sent) and ``body`` the request's bytes exactly as received.
A receiver recomputes it, compares in constant time, and refuses a timestamp more than a few minutes off
its clock (a replay); ``E31-Webhook-Id`` is the same on every retry of one delivery, to drop duplicates.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

SCHEME = "v1"
SECRET_PREFIX = "whsec_"


def secret_new() -> str:
    """A new signing secret: ``whsec_`` and 64 hex digits (256 random bits)."""
    return SECRET_PREFIX + secrets.token_hex(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``E31-Webhook-Signature`` value of ``body`` sent at ``timestamp`` (unix seconds)."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def signature_valid(secret: str, timestamp: str, body: bytes, header: str, *, now: float,
                    tolerance_s: float = 300) -> bool:
    """True when ``header`` (``v1=<hex>``, several comma-separated allowed, as while a secret rotates)
    signs ``body`` at ``timestamp`` and the timestamp lies within ``tolerance_s`` seconds of ``now``
    (unix seconds). The receiver's side, kept here for the tests and as the SPEC's reference."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now - ts) > tolerance_s:
        return False
    want = signature(secret, ts, body)
    return any(hmac.compare_digest(want, part.strip()) for part in header.split(","))
