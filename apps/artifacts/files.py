"""One output file of a bundle, read straight from the stored archive (issue 16 item 2).

A bundle packed as a plain tar (issue 15) keeps, for each file of its manifest, the
``offset`` where the file's bytes start in the archive: ``archive[offset:offset +
size_bytes]`` is the file, so one file is a seek and a read, never an unpacking. A
``bundle.tar.gz`` from an older agent has no offsets; its files come only in the whole
bundle (:class:`NotAddressable`). Only a path listed in the manifest, exactly, names a
file: nothing here joins a path onto a directory, so ``..`` or an absolute path can only
miss.
"""
from __future__ import annotations

import codecs
import mimetypes
import os
from dataclasses import dataclass
from typing import Any

from .models import Bundle
from .storage import open_span

PREVIEW_BYTES = 256 * 1024  # what a preview reads of a file at most (bytes)
# Preview kinds by file name suffix. SVG is an image the page shows in <img> (where its scripts
# never run) but is never served inline: opened on its own it would run scripts on this origin.
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".svg": "image/svg+xml"}
INLINE_IMAGES = frozenset(IMAGE_TYPES) - {".svg"}
TEXT_SUFFIXES = frozenset({".txt", ".log", ".out", ".err", ".md", ".rst", ".yaml", ".yml", ".toml", ".ini",
                           ".cfg", ".conf", ".py", ".sh", ".tsv", ".jsonl", ".ndjson", ".xml", ".tex"})
# What a preview kind is served as with ``?inline=1``: types a browser shows as data, never runs.
INLINE_TYPES = {"json": "application/json", "csv": "text/csv; charset=utf-8",
                "text": "text/plain; charset=utf-8"}
# The policy of every file response: nothing in it runs, loads or frames (a sandboxed origin).
FILE_CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"


class NotAddressable(Exception):
    """The bundle's archive has no offsets (a ``bundle.tar.gz`` from an older agent): its files
    come only in the whole bundle."""


@dataclass(frozen=True)
class OutputFile:
    """One file of a bundle's manifest: its ``path`` in the bundle, ``size_bytes``, ``sha256``
    (hex) and ``offset`` (bytes into the archive where its data starts; None without one)."""

    bundle: Bundle
    path: str
    size_bytes: int
    sha256: str
    offset: int | None

    @property
    def name(self) -> str:
        """The last part of the path (the download's file name)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def kind(self) -> str | None:
        """The preview kind, ``image``, ``json``, ``csv`` or ``text``, or None (no preview)."""
        return preview_kind(self.path)


def preview_kind(path: str) -> str | None:
    """``image``, ``json``, ``csv``, ``text`` or None by the suffix of ``path`` (case-insensitive)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in IMAGE_TYPES:
        return "image"
    if suffix == ".json":
        return "json"
    if suffix == ".csv":
        return "csv"
    if suffix in TEXT_SUFFIXES or not suffix and path.rsplit("/", 1)[-1].isupper():  # README, LICENSE
        return "text"
    return None


def content_type(path: str, *, inline: bool) -> tuple[str, bool]:
    """(``Content-Type``, whether it may be shown inline) for a file named ``path``.

    Inline only when asked (``inline``) and the file is a preview kind that cannot run:
    a PNG, JPEG, GIF or WebP image (as itself), JSON, CSV or text (as ``application/json``,
    ``text/csv``, ``text/plain``). SVG and everything else is an attachment, typed as
    :func:`mimetypes.guess_type` guesses (``application/octet-stream`` when it cannot).
    """
    suffix = os.path.splitext(path)[1].lower()
    kind = preview_kind(path)
    if inline and suffix in INLINE_IMAGES:
        return IMAGE_TYPES[suffix], True
    if inline and kind in INLINE_TYPES:
        return INLINE_TYPES[kind], True
    if suffix in IMAGE_TYPES:
        return IMAGE_TYPES[suffix], False
    guessed, encoding = mimetypes.guess_type(path, strict=False)
    return (guessed if guessed and not encoding else "application/octet-stream"), False


def bundle_files(bundle: Bundle) -> list[OutputFile]:
    """Every file of ``bundle``'s manifest, in manifest order."""
    return [_entry(bundle, f) for f in bundle.files]


def bundle_file(bundle: Bundle, path: str) -> OutputFile | None:
    """The file of ``bundle`` listed exactly as ``path``, or None (no normalisation: ``a/../b``
    or ``/b`` never name ``b``)."""
    entry = next((f for f in bundle.files if f.get("path") == path), None)
    return _entry(bundle, entry) if entry is not None else None


def _entry(bundle: Bundle, f: dict[str, Any]) -> OutputFile:
    offset = f.get("offset")
    return OutputFile(bundle, f["path"], int(f["size_bytes"]), str(f["sha256"]),
                      int(offset) if offset is not None else None)


def addressable(bundle: Bundle) -> bool:
    """Whether each file of ``bundle`` can be read on its own (its archive is a plain tar with
    offsets); an empty bundle counts as addressable."""
    return bool(bundle.file) and not bundle.file.name.endswith(".tar.gz") and all(
        f.get("offset") is not None for f in bundle.files)


def file_check(f: OutputFile) -> None:
    """Raise :class:`NotAddressable` when ``f`` cannot be read on its own, or its bytes would lie
    past the end of the archive."""
    if f.offset is None or not addressable(f.bundle):
        raise NotAddressable(
            f"{f.path} cannot be fetched on its own: bundle of attempt {f.bundle.attempt} was packed as "
            "bundle.tar.gz by an older agent, without file offsets. Download the whole bundle instead.")
    if f.offset < 0 or f.offset + f.size_bytes > (f.bundle.size_bytes or 0):
        raise NotAddressable(f"{f.path} lies outside the stored archive; download the whole bundle instead.")


def file_head(f: OutputFile, limit: int = PREVIEW_BYTES) -> bytes:
    """The first ``limit`` bytes of ``f`` (all of it when smaller), read from the archive at its offset.

    Raises:
        NotAddressable: see :func:`file_check`.
    """
    file_check(f)
    fh = open_span(f.bundle.file, f.offset, min(limit, f.size_bytes))
    try:
        return fh.read(min(limit, f.size_bytes))
    finally:
        fh.close()


def decode_head(data: bytes, *, cut: bool) -> str:
    """``data`` as UTF-8 text (bad bytes replaced); with ``cut`` (the file goes on past ``data``)
    a character split at the end is dropped rather than shown as a replacement."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=not cut)
