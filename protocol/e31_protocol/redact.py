"""Hiding credentials in URLs wherever a spec, an error or an event is shown (issue 23, SPEC §2).

One function for the server (the job page's spec, the API's ``spec``, events, errors) and the
agent (its messages and logs): :func:`redact_text` replaces the userinfo of every URL
(``https://user:pass@host/``) and the value of every signature part of a presigned URL's query
(``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``Signature``, ``sig``,
``token``...) by ``***``. The URL stays readable: scheme, host, path and the other parameters.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

MASK = "***"

# Query parameters that carry a signature or a credential: AWS SigV4 and SigV2, Google Cloud
# Storage (X-Goog-*), Azure SAS (sig), CloudFront (Signature, Key-Pair-Id, Policy), and generic
# tokens and keys.
SECRET_PARAMS = frozenset(p.lower() for p in (
    "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "AWSAccessKeyId", "Signature",
    "X-Goog-Signature", "X-Goog-Credential", "GoogleAccessId", "sig", "token", "access_token",
    "Key-Pair-Id", "Policy", "api_key", "apikey", "key", "password", "secret", "auth",
))

# scheme://userinfo@ : the userinfo ends at the LAST @ before the path (no / ? # in it), so a password
# holding an @ (``https://bob:p@ss@host``) is masked whole
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s\"'<>]+)@")
# name=value in a query (after ? or &, also &amp; in HTML-escaped text); a name may be percent-encoded
_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[A-Za-z0-9_.%-]+)=(?P<value>[^&#\s\"'<>]*)")


def _param(match: re.Match[str]) -> str:
    if unquote(match.group("name")).lower() in SECRET_PARAMS and match.group("value"):
        return f"{match.group('lead')}{match.group('name')}={MASK}"
    return match.group(0)


def redact_text(text: str) -> str:
    """``text`` with URL userinfo and signature query values replaced by ``***``."""
    if not text or ("@" not in text and "=" not in text):
        return text
    out = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    if "://" in out or "?" in out:
        out = _PARAM.sub(_param, out)
    return out


def redact_value(value: Any) -> Any:
    """:func:`redact_text` applied to every string (keys kept) of a JSON-like value."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    return value
