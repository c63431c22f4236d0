"""Whose identity an ``s3://`` or ``gs://`` input is read with (issue 23, SPEC §2).

- With ``data[i].credentials``: the storage options the job's owner stored (a JSON object, sent in
  the assignment only to the node holding the attempt), for that source only.
- Without: anonymously (``anon=True`` for s3fs, ``token="anon"`` for gcsfs), never with the
  node's own identity (its instance role, ``~/.aws``, the host's gcloud login), so a tenant cannot
  read what the operator's account may.
- Except under a URL prefix the operator names in ``E31_DATA_NODE_CREDENTIALS_FOR``
  (comma-separated, e.g. ``s3://open-data/,gs://shared-corpus/``): a bucket every tenant may read,
  read with the node's identity.

:func:`credentials_id` names a set of credentials without revealing it (HMAC-SHA256 under a key
of this agent process), for the node cache's key (an entry read with some credentials is served
only to a job that names the same ones).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets as _secrets
import socket
from typing import Any
from urllib.parse import urlsplit

_NODE_KEY = _secrets.token_bytes(32)  # per agent process: an id means nothing off this node

S3_OPTIONS = frozenset({"key", "secret", "token", "endpoint_url", "region_name"})
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


class CredentialsError(ValueError):
    """The credentials of an input cannot be used; the message never quotes them."""


def node_credentials_prefixes() -> tuple[str, ...]:
    """``E31_DATA_NODE_CREDENTIALS_FOR``: URL prefixes read with the node's own identity."""
    return tuple(p.strip() for p in os.environ.get("E31_DATA_NODE_CREDENTIALS_FOR", "").split(",") if p.strip())


def _normal_prefix(prefix: str) -> str:
    return prefix if prefix.endswith("/") else prefix + "/"


def node_identity_allowed(url: str, prefixes: tuple[str, ...] | None = None) -> bool:
    """True when ``url`` lies under a prefix the operator names (bucket ``s3://b`` covers ``s3://b/...``)."""
    for prefix in node_credentials_prefixes() if prefixes is None else prefixes:
        if url == prefix.rstrip("/") or url.startswith(_normal_prefix(prefix)):
            return True
    return False


def endpoints_allowed() -> frozenset[str]:
    """``E31_DATA_ENDPOINTS_ALLOWED``: ``host:port`` of S3-compatible endpoints the operator lets
    tenants name whatever their address (a store on the site's own network, a test server)."""
    return frozenset(p.strip().lower() for p in os.environ.get("E31_DATA_ENDPOINTS_ALLOWED", "").split(",")
                     if p.strip())


def endpoint_check(endpoint: object) -> str:
    """``endpoint`` if a tenant may name it as an ``endpoint_url``: one the operator allows
    (:func:`endpoints_allowed`), else ``https://`` to a host whose every address is public. The
    agent fetches with the host's network, outside the job's sandbox: an endpoint on a private,
    loopback or link-local address (the cloud metadata service at 169.254.169.254) would be a
    request forgery from the node.

    Raises:
        CredentialsError: the endpoint is not one of those.
    """
    if not isinstance(endpoint, str):
        raise CredentialsError("its s3 credentials' endpoint_url is not a URL")
    parts = urlsplit(endpoint)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise CredentialsError("its s3 credentials' endpoint_url has a bad port") from None
    if not host or parts.scheme not in ("http", "https"):
        raise CredentialsError("its s3 credentials' endpoint_url is not an http(s) URL")
    if f"{host}:{port}" in endpoints_allowed():
        return endpoint
    if parts.scheme != "https":
        raise CredentialsError("its s3 credentials' endpoint_url must be https://")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        raise CredentialsError("its s3 credentials' endpoint_url names a host that does not resolve") from None
    if not addresses or not all(ipaddress.ip_address(a.split("%", 1)[0]).is_global for a in addresses):
        raise CredentialsError("its s3 credentials' endpoint_url is not on a public address")
    return endpoint


def storage_options(url: str, credentials_json: str | None, *,
                    prefixes: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The fsspec keyword arguments to read ``url`` with (module docstring).

    Raises:
        CredentialsError: the credentials are not a JSON object of options for the URL's protocol.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("s3", "gs", "gcs"):
        return {}
    if credentials_json is None:
        if node_identity_allowed(url, prefixes):
            return {}
        return {"anon": True} if scheme == "s3" else {"token": "anon"}
    try:
        options = json.loads(credentials_json)
    except ValueError:
        raise CredentialsError("its credentials are not JSON") from None
    if not isinstance(options, dict):
        raise CredentialsError("its credentials are not a JSON object")
    if scheme == "s3":
        unknown = set(options) - S3_OPTIONS
        if unknown:
            raise CredentialsError(f"its s3 credentials have unknown options: {', '.join(sorted(unknown))}")
        out: dict[str, Any] = {k: v for k, v in options.items() if k in ("key", "secret", "token")}
        if "endpoint_url" in options:
            out["endpoint_url"] = endpoint_check(options["endpoint_url"])
        if options.get("region_name"):
            out["client_kwargs"] = {"region_name": options["region_name"]}
        out["anon"] = False
        return out
    if options.get("token_uri", GOOGLE_TOKEN_URI) != GOOGLE_TOKEN_URI:  # a POST to any URL from the node
        raise CredentialsError(f"its gs credentials' token_uri must be {GOOGLE_TOKEN_URI}")
    return {"token": options}  # a service-account JSON, as a dict (gcsfs)


def credentials_id(credentials_json: str | None) -> str | None:
    """An id of these credentials for the node cache (hex HMAC-SHA256 under this process's key);
    None for an anonymous read."""
    if credentials_json is None:
        return None
    return hmac.new(_NODE_KEY, credentials_json.encode("utf-8"), hashlib.sha256).hexdigest()
