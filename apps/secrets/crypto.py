"""The key that encrypts secrets at rest, and the encryption (``cryptography``'s Fernet: AES-128-CBC
with an HMAC-SHA256, https://cryptography.io/en/latest/fernet/).

The keys come from ``E31_SECRETS_KEY`` (Fernet keys, comma-separated, the first encrypts and every
one decrypts: :class:`~cryptography.fernet.MultiFernet`), else from the key file
``E31_SECRETS_KEY_FILE`` (``var/secrets_key``, one key a line, the same order), generated on first
use, never at settings import (``make lint`` writes nothing under ``var/``). Neither is in the
database, so a copy of the database opens no secret.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from apps.core.secretfile import read_or_create


class SecretsKeyError(Exception):
    """No usable key: ``E31_SECRETS_KEY`` is malformed, or a token opens under none of the keys."""


def key_file() -> Path:
    """The key file (``E31_SECRETS_KEY_FILE``)."""
    return Path(settings.E31_SECRETS_KEY_FILE)


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` to a private temporary file beside ``path`` and move it into place (0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _file_keys() -> list[bytes]:
    """The key file's keys; on first use a new key, linked into place so processes starting at once
    (web, worker) all take the one the first link made."""
    path = key_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = read_or_create(path, make=lambda: Fernet.generate_key().decode() + "\n")
    return [line.strip().encode() for line in text.splitlines() if line.strip()]


def keys() -> list[bytes]:
    """The Fernet keys, the encrypting one first (module docstring).

    Raises:
        SecretsKeyError: the key file cannot be read or made (the heartbeat and the work answer
            treat it as "this attempt cannot start", never a 500).
    """
    configured = settings.E31_SECRETS_KEY
    if configured:
        return [k.strip().encode() for k in configured.split(",") if k.strip()]
    try:
        return _file_keys()
    except OSError as exc:  # unreadable or unwritable: the secrets are closed, the rest of the site is not
        raise SecretsKeyError(f"the secrets key file cannot be read: {exc.strerror}") from None


def cipher() -> MultiFernet:
    """The site's cipher: the first key encrypts, every key decrypts.

    Raises:
        SecretsKeyError: a configured key is not a Fernet key (32 url-safe base64-encoded bytes).
    """
    try:
        return MultiFernet([Fernet(k) for k in keys()])
    except (ValueError, TypeError) as exc:
        raise SecretsKeyError(f"E31_SECRETS_KEY holds a key that is not a Fernet key: {exc}") from None


def encrypt(value: str) -> bytes:
    """The token of ``value`` (UTF-8) under the current key."""
    return cipher().encrypt(value.encode("utf-8"))


def decrypt(token: bytes, *, under: MultiFernet | None = None) -> str:
    """The value of ``token``.

    Raises:
        SecretsKeyError: no key opens it (the key was lost or rotated away).
    """
    try:
        return (under or cipher()).decrypt(bytes(token)).decode("utf-8")
    except InvalidToken:
        raise SecretsKeyError("no secrets key opens this value (was the key replaced?)") from None


def file_keys_write(new_keys: list[bytes]) -> None:
    """Replace the key file's keys (the first encrypts), written whole."""
    _write_whole(key_file(), "".join(k.decode() + "\n" for k in new_keys))
