"""Fetching a bundle: resumable download, the archive's sha256, safe unpacking, every file's sha256.

A download goes to ``<dest>.part`` first. Run again after an interruption, it asks only for
the missing bytes (``Range: bytes=N-`` with ``If-Range: "<sha256>"``, so a bundle that changed
meanwhile is sent whole instead). The archive is opened with ``tarfile`` mode ``"r:*"``
(plain tar or tar.gz) and unpacked with the ``data`` filter (no absolute paths, no ``..``,
no links out, no devices), then each file the manifest lists is checked against its sha256.
"""
from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import Api
from .errors import CliError, Exit

BLOCK = 1 << 20  # bytes read or written at a time
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Fetched:
    """One downloaded archive: where it is, its size in bytes, and the byte it resumed from
    (0: fetched whole; ``size``: it was already complete)."""

    path: Path
    size_bytes: int
    resumed_from: int


def _sha256_of(path: Path, limit: int | None = None) -> hashlib._Hash:
    digest = hashlib.sha256()
    left = limit
    with path.open("rb") as fh:
        while left is None or left > 0:
            data = fh.read(BLOCK if left is None else min(BLOCK, left))
            if not data:
                break
            digest.update(data)
            if left is not None:
                left -= len(data)
    return digest


def fetch(api: Api, path: str, dest: Path, *, size: int, sha256: str,
          advance: Callable[[int], None] = lambda n: None) -> Fetched:
    """Download ``path`` (an API path) to ``dest``, resuming ``dest.part`` when there is one.

    Args:
        size: the expected size in bytes; sha256: the expected hex digest (the job's ``bundle``).
        advance: called with the byte count so far (a progress bar), first with the resumed part.

    Raises:
        CliError: HTTP or network error (exit 4-8; the ``.part`` file stays for the next try),
            or the archive's sha256 does not match (exit 9; the ``.part`` file is removed).
    """
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        have = 0
    digest = _sha256_of(part, have) if have else hashlib.sha256()
    resumed_from = have
    advance(have)
    if have < size:
        headers = {"Range": f"bytes={have}-", "If-Range": f'"{sha256}"'} if have else {}
        with api.stream("GET", path, headers=headers, timeout=60) as resp:
            if resp.status_code != 206:  # whole file: start again
                have, resumed_from, digest = 0, 0, hashlib.sha256()
                advance(0)
            with part.open("r+b" if have else "wb") as fh:
                fh.seek(have)
                fh.truncate()
                for data in resp.iter_bytes(BLOCK):
                    fh.write(data)
                    digest.update(data)
                    have += len(data)
                    advance(have)
    if have != size or digest.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise CliError(f"the downloaded bundle does not match: {have} bytes with sha256 {digest.hexdigest()}, "
                       f"expected {size} bytes with sha256 {sha256}; removed it, run `e31 get` again",
                       Exit.VERIFY)
    os.replace(part, dest)
    return Fetched(dest, size, resumed_from)


def unpack(archive: Path, target: Path) -> list[str]:
    """Unpack ``archive`` (tar or tar.gz) into ``target`` safely; returns the member names.

    Raises:
        CliError: (exit 9) not a tar archive, or a member the ``data`` filter refuses.
    """
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            names = tar.getnames()
            tar.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise CliError(f"cannot unpack {archive}: {exc}", Exit.VERIFY) from None
    return names


def verify(target: Path, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check every manifest entry (``{"path", "size_bytes", "sha256"}``) under ``target``, and that
    the archive's own ``manifest.json`` lists the same files.

    Returns:
        The entries, each with ``"ok": True``.

    Raises:
        CliError: (exit 9) naming every file missing, of the wrong size or with the wrong sha256.
    """
    problems: dict[str, list[str]] = {}
    inside = target / MANIFEST
    if inside.is_file():
        try:
            listed = {f["path"]: f["sha256"] for f in json.loads(inside.read_text())["files"]}
        except (ValueError, KeyError, TypeError):
            listed = None
        if listed is not None and listed != {f["path"]: f["sha256"] for f in files}:
            problems[MANIFEST] = ["lists other files than the job's bundle record"]
    for entry in files:
        path = target / entry["path"]
        if not path.is_file():
            problems[entry["path"]] = ["missing from the archive"]
        elif path.stat().st_size != entry["size_bytes"]:
            problems[entry["path"]] = [f"{path.stat().st_size} bytes, expected {entry['size_bytes']}"]
        elif _sha256_of(path).hexdigest() != entry["sha256"]:
            problems[entry["path"]] = [f"sha256 differs from the manifest's {entry['sha256']}"]
    if problems:
        raise CliError(f"{len(problems)} file(s) in {target} failed verification", Exit.VERIFY, fields=problems)
    return [{**entry, "ok": True} for entry in files]
