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
import json
import os
import secrets as _secrets
from typing import Any

_NODE_KEY = _secrets.token_bytes(32)  # per agent process: an id means nothing off this node

S3_OPTIONS = frozenset({"key", "secret", "token", "endpoint_url", "region_name"})


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
        out: dict[str, Any] = {k: v for k, v in options.items() if k in ("key", "secret", "token", "endpoint_url")}
        if options.get("region_name"):
            out["client_kwargs"] = {"region_name": options["region_name"]}
        out["anon"] = False
        return out
    return {"token": options}  # a service-account JSON, as a dict (gcsfs)


def credentials_id(credentials_json: str | None) -> str | None:
    """An id of these credentials for the node cache (hex HMAC-SHA256 under this process's key);
    None for an anonymous read."""
    if credentials_json is None:
        return None
    return hmac.new(_NODE_KEY, credentials_json.encode("utf-8"), hashlib.sha256).hexdigest()
