"""A job's inputs as the node caches see them: whose they are (issue 23 item 1).

The rule is :mod:`e31_protocol.inputs` (one definition for the server and the agent); this
module supplies what only the server holds: the opaque tenant id of a job's owner and the id of
a stored credential, both keyed hashes under a key derived from ``SECRET_KEY``
(:func:`input_key`), so a node learns neither the account nor the credential, and cannot make
up another tenant's scope. The scheduling cycle names queued jobs' inputs with
:func:`spec_input_identities` (cache affinity, pre-staging); an assignment and a pre-stage offer
carry :func:`input_scope`, from which the agent computes the same identities for its cache.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from e31_protocol import payloads
from e31_protocol.inputs import input_identity, keyed_id


def input_key() -> bytes:
    """The HMAC key of owner and credential ids (32 bytes): derived from ``SECRET_KEY``, so every
    process of a site agrees and a rotated ``SECRET_KEY`` only turns cached entries into misses."""
    return hashlib.sha256(b"e31-input-scope\0" + settings.SECRET_KEY.encode()).digest()


def owner_scope(owner_id: int) -> str:
    """The opaque tenant id of account ``owner_id`` for node caches (``ow1-<32 hex>``)."""
    return keyed_id(input_key(), "ow1", f"user:{owner_id}")


def input_credentials_id(*, value: str | bytes) -> str:
    """The id of a stored credential (``cr1-<32 hex>``), for ``data[i].credentials`` (issue 23 item 3):
    computed here, where the value is held; two jobs whose inputs are read with the same
    credential value share cache entries of that URL, no other job does."""
    return keyed_id(input_key(), "cr1", value)


def _credential_ids(data: Sequence[Mapping[str, Any]], credentials: Mapping[int, str] | None) -> list[str | None]:
    return [(credentials or {}).get(i) for i in range(len(data))]


def input_scope(*, owner_id: int, data: Sequence[Mapping[str, Any]] | None,
                credentials: Mapping[int, str] | None = None) -> payloads.InputScope:
    """What an assignment or a pre-stage offer says about whose inputs these are.

    ``credentials``: ``{data index: credentials id}`` (:func:`input_credentials_id`) of the inputs
    read with a stored credential; the list is sent only when there is one.
    """
    scope: payloads.InputScope = {"owner": owner_scope(owner_id)}
    ids = _credential_ids(data or [], credentials)
    if any(ids):
        scope["credentials"] = ids
    return scope


def spec_input_identities(*, owner_id: int, data: Sequence[Mapping[str, Any]] | None,
                          credentials: Mapping[int, str] | None = None) -> tuple[str, ...]:
    """The cache identities of a job's ``spec.data`` (:func:`e31_protocol.inputs.input_identity`),
    in order, as the agent computes them from :func:`input_scope`; an item with none is left out."""
    owner = owner_scope(owner_id)
    ids = _credential_ids(data or [], credentials)
    out = []
    for item, credentials_id in zip(data or [], ids, strict=True):
        identity = input_identity(str(item.get("source") or ""), owner=owner, credentials_id=credentials_id)
        if identity is not None:
            out.append(identity)
    return tuple(out)
