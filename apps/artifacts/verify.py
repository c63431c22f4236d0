"""Checking an output bundle against its manifest before the job may be released (issue 4, item 8).

One pass over the archive as it is joined: the compressed bytes feed the
whole-archive sha256 and the destination file while :mod:`tarfile` reads
the same stream (``r|gz``) and every member's bytes are hashed. Nothing is
extracted; names are only compared.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from collections.abc import Callable
from typing import IO, Any

MANIFEST = "manifest.json"
READ_BYTES = 1 << 20


class BundleInvalid(ValueError):
    """The archive does not match its manifest (or is no tar.gz at all); the message says how."""


class TeeReader:
    """A file-like over ``source`` that hashes every byte read and hands it to ``sink``."""

    def __init__(self, source: IO[bytes], sink: Callable[[bytes], Any] | None = None) -> None:
        self.source = source
        self.sink = sink
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.source.read(n)
        if data:
            self.digest.update(data)
            self.size += len(data)
            if self.sink is not None:
                self.sink(data)
        return data

    def drain(self) -> None:
        """Read what is left (tar padding after the end marker, or all of it)."""
        while self.read(READ_BYTES):
            pass


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "\x00" not in name


def verify_stream(reader: TeeReader, files: list[dict[str, Any]]) -> None:
    """Read the whole tar.gz from ``reader`` and check it against ``files`` (path, size_bytes, sha256).

    Every member is a regular file (directories allowed) with a safe relative
    name; each file is listed once with its exact size and sha256, and every
    listed file is there. A ``manifest.json`` at the root, when present, must
    list the same files. ``reader`` is drained to the end either way.

    Raises:
        BundleInvalid: the first difference found, naming the file.
    """
    claimed = {f["path"]: f for f in files}
    if len(claimed) != len(files):
        raise BundleInvalid("the manifest lists a path twice")
    seen: set[str] = set()
    manifest: bytes | None = None
    try:
        with tarfile.open(fileobj=reader, mode="r|gz") as tar:  # type: ignore[call-overload]
            for member in tar:
                name = posixpath.normpath(member.name) if member.name not in ("", ".") else "."
                if member.isdir():
                    continue
                if not _safe_name(member.name) or name != member.name.rstrip("/"):
                    raise BundleInvalid(f"archive member {member.name!r}: not a plain relative path")
                if not member.isreg():
                    raise BundleInvalid(f"archive member {member.name!r}: not a regular file")
                if name in seen:
                    raise BundleInvalid(f"archive member {name!r} appears twice")
                seen.add(name)
                fh = tar.extractfile(member)
                assert fh is not None
                if name == MANIFEST:
                    manifest = fh.read(64 * 1024 * 1024)
                    continue
                entry = claimed.get(name)
                if entry is None:
                    raise BundleInvalid(f"archive member {name!r} is not in the manifest")
                digest = hashlib.sha256()
                size = 0
                while chunk := fh.read(READ_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
                if size != entry["size_bytes"]:
                    raise BundleInvalid(f"{name}: {size} bytes in the archive, {entry['size_bytes']} in the manifest")
                if digest.hexdigest() != str(entry["sha256"]).lower():
                    raise BundleInvalid(f"{name}: sha256 in the archive differs from the manifest")
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, BundleInvalid):
            raise
        raise BundleInvalid(f"not a readable tar.gz: {exc}") from None
    finally:
        reader.drain()
    missing = sorted(set(claimed) - seen)
    if missing:
        raise BundleInvalid(f"{missing[0]}: in the manifest but not in the archive"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    if manifest is not None:
        try:
            inner = {(f["path"], f["size_bytes"], str(f["sha256"]).lower())
                     for f in json.loads(manifest)["files"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise BundleInvalid(f"manifest.json in the archive is unreadable: {exc}") from None
        if inner != {(f["path"], f["size_bytes"], str(f["sha256"]).lower()) for f in files}:
            raise BundleInvalid("manifest.json in the archive differs from the manifest sent")
