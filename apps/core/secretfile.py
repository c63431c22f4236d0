"""A secret kept in a file under ``var/``: created once, 0600, and read whole by every process."""
from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path


def read_or_create(path: Path, nbytes: int = 32, *, make: Callable[[], str] | None = None) -> str:
    """The secret in ``path``; if there is none, a new one: ``make()``, or ``nbytes`` random bytes
    (URL-safe text). Used for the site's secret key, the demo password, the metrics token and the
    secrets' Fernet key (``apps/secrets/crypto.py``).

    The new secret is written whole to a private temporary file (0600) next to ``path`` and linked
    into place, so processes starting at once (web, worker, agents' launcher) all read the one
    secret the first link made: none fails because another created it first, and none reads a
    half-written file.

    Raises:
        OSError: the directory cannot be written or the file read.
    """
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(make() if make else secrets.token_urlsafe(nbytes))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
        finally:
            os.unlink(tmp)
    path.chmod(0o600)
    return path.read_text().strip()
