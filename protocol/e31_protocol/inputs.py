"""An input's cache identity: who may be served a cached copy of ``spec.data[i]`` (issue 23 item 1).

One definition for both sides. The server names each queued job's inputs with
:func:`input_identity` for cache affinity and pre-staging; the agent keys its input cache by the
same identity and reports the identities it holds with each heartbeat (``cached_inputs``,
docs/agent-protocol.md), so placement and the cache follow one rule.

The rule (SPEC §6, "Inputs"):

- An **upload** (``upload:<id>``) is identified by its id *and its scope*: the job owner's
  opaque tenant id (``owner``, a keyed hash the server computes: :func:`keyed_id`), or, once
  projects exist (issue 20), the project's (``project``, which then replaces the owner). A job of
  another account never names the same identity, so it never gets those bytes.
- A **URL** (``https://``, ``s3://``, ``gs://``, ``file://``) is identified by its canonical
  source (:func:`canonical_source`) and the identity of the credentials it was read with:
  ``credentials_id`` (``None``: anonymous; a keyed hash computed where the credentials are held,
  for ``data[i].credentials``) together with whatever credentials the URL carries itself
  (userinfo, the signature of a presigned URL: :func:`source_credentials`). Two jobs reading
  the same URL with the same credentials, or both anonymously, may share one entry: either
  could have fetched those bytes from this node itself.
- A ``sha256`` in the spec is **not** part of the identity: it only checks the bytes' integrity
  and picks a version. A digest alone never unlocks bytes fetched for someone else.

Identities are opaque strings ``in1-<40 hex>`` (a SHA-256 over the parts above), so no URL,
credential or account id travels in a heartbeat or rests in the server's ``NodeCache`` rows.

A container image the node's store holds is reported the same way, as :func:`image_identity`
(``img1-<40 hex>`` over the image reference alone): its layers save any job naming it a download,
and whether a job may run it is the registry's to say at the launch (``e31_agent.images``), so
the identity carries no tenant. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import unquote, urlsplit

from .redact import redact_text

IDENTITY_PREFIX = "in1-"
IDENTITY_HEX = 40  # hex digits of the SHA-256 kept: 160 bits
KEYED_HEX = 32  # hex digits of an HMAC-SHA256 kept by keyed_id: 128 bits
DEFAULT_PORTS = {"http": 80, "https": 443}
REDACTED = "***"

# Query parameters that are (or go with) credentials: the signature of an S3, GCS or Azure
# presigned URL and common token parameters. Compared in lower case; every ``x-amz-*`` and
# ``x-goog-*`` parameter counts too. Leaving one out of the canonical source is always safe:
# what is left out goes into the credentials part of the identity.
SIGNED_PARAMS = frozenset({
    "signature", "awsaccesskeyid", "expires", "sig", "se", "sp", "sv", "sr", "st", "spr", "skoid",
    "sktid", "skt", "ske", "sks", "skv", "token", "access_token", "auth", "api_key", "apikey", "key",
    "googleaccessid", "policy", "key-pair-id",
})


def _signed(name: str) -> bool:
    low = unquote(name).lower()
    return low in SIGNED_PARAMS or low.startswith(("x-amz-", "x-goog-"))


def _split(source: str) -> tuple[str, list[str], list[str]]:
    """``(canonical source, credential parts, query parts kept)`` of a URL (not an upload)."""
    parts = urlsplit(source.strip())
    scheme = parts.scheme.lower()
    secrets: list[str] = []
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        secrets.append("userinfo:" + userinfo)
    host, port = netloc, ""
    if netloc.startswith("["):  # an IPv6 literal
        end = netloc.find("]")
        host, port = netloc[:end + 1], netloc[end + 2:] if netloc[end + 1:end + 2] == ":" else ""
    elif ":" in netloc:
        host, port = netloc.rsplit(":", 1)
    host = host.lower()
    if port and port.isdigit() and DEFAULT_PORTS.get(scheme) == int(port):
        port = ""
    path = parts.path or ("/" if scheme in DEFAULT_PORTS else "")
    kept = []
    for piece in parts.query.split("&") if parts.query else []:
        name = piece.split("=", 1)[0]
        if _signed(name):
            secrets.append("query:" + piece)
        else:
            kept.append(piece)
    canonical = f"{scheme}://{host}{':' + port if port else ''}{path}" + ("?" + "&".join(kept) if kept else "")
    return canonical, secrets, kept


def is_upload(source: str) -> bool:
    """True for an ``upload:<id>`` source (a file sent to the site)."""
    return source.strip().startswith("upload:")


def canonical_source(source: str) -> str:
    """``source`` in one spelling, with no credentials in it.

    ``upload:<id>``: the id in lower case. A URL: scheme and host in lower case, a default port
    (80 for http, 443 for https) dropped, an empty http(s) path as ``/``, the fragment dropped, the
    userinfo and the signature query parameters (:data:`SIGNED_PARAMS`) left out; the rest of the
    path and query as written (no re-encoding, so two resources never share a spelling).
    """
    if is_upload(source):
        return "upload:" + source.strip()[len("upload:"):].strip().lower()
    return _split(source)[0]


def source_credentials(source: str) -> str | None:
    """The credentials a URL carries itself (its userinfo, its signature query parameters), as
    one string; None when it carries none (an upload never does)."""
    if is_upload(source):
        return None
    secrets = _split(source)[1]
    return "\n".join(secrets) if secrets else None


def display_source(source: str) -> str:
    """``source`` fit for a log, an index file or a page: userinfo and signature parameter values
    shown as ``***`` (``https://***@host/x?X-Amz-Signature=***``); everything else as written. The
    one redaction rule, :func:`e31_protocol.redact.redact_text`."""
    return source if is_upload(source) else redact_text(source)


def keyed_id(key: bytes, purpose: str, value: str | bytes) -> str:
    """An opaque id of ``value``: ``<purpose>-`` and 32 hex digits of HMAC-SHA256 under ``key``.

    Computed where the value is held (the server, for an account id or a stored credential), so
    the id can be sent to a node and stored without revealing the value, and cannot be guessed
    without ``key``. ``purpose`` (``ow1`` an owner, ``pr1`` a project, ``cr1`` credentials)
    separates the uses of one key. Raises ``ValueError`` for an empty key.
    """
    if not key:
        raise ValueError("keyed_id needs a key")
    raw = value.encode() if isinstance(value, str) else value
    return f"{purpose}-" + hmac.new(key, purpose.encode() + b"\0" + raw, hashlib.sha256).hexdigest()[:KEYED_HEX]


def input_identity(source: str, *, owner: str | None, project: str | None = None,
                   credentials_id: str | None = None) -> str | None:
    """The cache identity of one input, ``in1-<40 hex>``; None when it must not be shared at all.

    Args:
        source: ``spec.data[i].source`` as submitted (credentials in it are fine: only a hash
            of them is kept).
        owner: the job owner's opaque tenant id (the server's :func:`keyed_id` of the account);
            scopes uploads. None: not known (an older server), and an upload is then not shared.
        project: the project's opaque id (issue 20, not yet sent): when given it scopes uploads
            instead of ``owner``.
        credentials_id: the id of the credentials a URL is read with (``data[i].credentials``);
            None: anonymous. Not used for uploads (the site's node token reads them).

    The same ``source`` with another sha256 has the same identity: the digest is integrity only.
    """
    if not source.strip():
        return None
    if is_upload(source):
        scope = f"project:{project}" if project else (f"owner:{owner}" if owner else None)
        if scope is None:
            return None
        parts = ["upload", canonical_source(source), scope]
    else:
        parts = ["url", canonical_source(source), credentials_id or "", source_credentials(source) or ""]
    digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()
    return IDENTITY_PREFIX + digest[:IDENTITY_HEX]


IMAGE_PREFIX = "img1-"


def image_identity(image: str) -> str | None:
    """The cache identity of a container image reference (``work.image``), ``img1-<40 hex>``, or
    None for an empty one. The reference is taken as written (``busybox`` and
    ``docker.io/library/busybox:latest`` are two identities: a missed preference, never a wrong one)."""
    ref = image.strip()
    if not ref:
        return None
    return IMAGE_PREFIX + hashlib.sha256(ref.encode()).hexdigest()[:IDENTITY_HEX]
