"""Checking an output bundle against its manifest before the job may be released (issue 4, item 8).

Two archive formats (docs/agent-protocol.md "bundle upload"):

* ``tar`` (agents from issue 15 on): an uncompressed POSIX (pax) tar in which
  every file's bytes lie whole at a known offset. Two threads read the stored
  archive at once: one hashes it whole, the other walks the headers
  (:mod:`tarfile`, random access: data is never read through it) and hashes
  each member's bytes straight from the file with large positioned reads. The
  offset of each file's data is returned, so the server can later serve one
  file with a Range read of the archive (issue 16 item 2).
* ``tar.gz`` (older agents; accepted for one more version): one streaming
  pass (``r|gz``), the compressed bytes feeding the whole-archive sha256 while
  every member is decompressed and hashed. No offsets (a gzip stream has no
  random access).

Either way nothing is extracted, names are only compared, and every manifest
entry is checked: each member a regular file with a safe relative name,
listed once with its size and sha256, every listed file present, and a
``manifest.json`` inside that agrees with the one sent.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tarfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
READ_BYTES = 4 * 1024 * 1024  # one positioned read of the stored archive
GZIP_MAGIC = b"\x1f\x8b"
TRAILER_MAX_BYTES = 64 * 1024  # zeros after the last member: the end marker and record padding


class BundleInvalid(ValueError):
    """The archive does not match its manifest (or is no tar at all); the message says how."""


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
    return (bool(name) and not name.startswith("/") and ".." not in parts
            and not any(ord(c) < 32 or ord(c) == 127 for c in name))  # a CR or LF breaks lists and pages


def verify_stream(reader: TeeReader, files: list[dict[str, Any]]) -> None:
    """The legacy ``tar.gz`` check: read the whole tar.gz from ``reader``; check it against ``files``
    (path, size_bytes, sha256).

    Every member is a regular file (directories allowed) with a safe relative
    name; each file is listed once with its exact size and sha256, and every
    listed file is there. A ``manifest.json`` at the root, when present, must
    list the same files. ``reader`` is drained to the end either way.

    Raises:
        BundleInvalid: the first difference found, naming the file.
    """
    claimed = _claimed(files)
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
    _check_complete(claimed, seen, manifest, files, {})


@dataclass(frozen=True)
class Verified:
    """What checking an archive found: its ``sha256`` (hex, of every byte), its ``format``
    (``"tar"`` or ``"tar.gz"``), and for a ``tar`` the byte ``offsets`` of each file's data
    in the archive (path -> offset; empty for a ``tar.gz``)."""

    sha256: str
    format: str
    offsets: dict[str, int] = field(default_factory=dict)


def verify_archive(path: str, size: int, files: list[dict[str, Any]]) -> Verified:
    """Check the stored archive at ``path`` (``size`` bytes) against ``files`` (path, size_bytes,
    sha256, and optionally offset) and hash it whole.

    A ``tar.gz`` (gzip magic bytes) is read as the legacy format (:func:`verify_stream`);
    anything else must be a plain tar (:func:`verify_tar`). The caller compares
    :attr:`Verified.sha256` with the checksum the agent claimed.

    Raises:
        BundleInvalid: the first difference found, naming the file.
    """
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            fh.seek(0)
            reader = TeeReader(_Limited(fh, size))
            verify_stream(reader, files)
            if reader.size != size:
                raise BundleInvalid(f"{reader.size} bytes in the archive, {size} announced")
            return Verified(reader.digest.hexdigest(), "tar.gz")
    return verify_tar(path, size, files)


def verify_tar(path: str, size: int, files: list[dict[str, Any]]) -> Verified:
    """Check an uncompressed tar at ``path`` (``size`` bytes) against ``files``; see the module.

    Members must be plain regular files (``0``, or directories, which are skipped): links,
    devices, FIFOs, sparse and continued files are refused. Each member's data must lie
    inside the archive, and only zeros may follow the last member (a header that
    :mod:`tarfile` cannot read ends its walk; bytes after it are refused, so no member can
    hide behind it from this check and still be found by another tar). An entry of ``files``
    that carries an ``offset`` must name the member's data offset.

    Raises:
        BundleInvalid: the first difference found, naming the file.
    """
    claimed = _claimed(files)
    stop = threading.Event()
    with open(path, "rb") as fh, ThreadPoolExecutor(1, thread_name_prefix="bundle-sha") as pool:
        if os.fstat(fh.fileno()).st_size != size:
            raise BundleInvalid(f"{os.fstat(fh.fileno()).st_size} bytes stored, {size} announced")
        whole = pool.submit(_sha256_of, fh.fileno(), size, stop)
        try:
            offsets, manifest = _walk(fh, size, claimed)
        except BaseException:
            stop.set()
            raise
        finally:
            digest = whole.result()
    _check_complete(claimed, set(offsets) | ({MANIFEST} if manifest is not None else set()), manifest, files,
                    offsets)
    return Verified(digest, "tar", offsets)


def verify_archive_stream(source: Any, size: int, files: list[dict[str, Any]]) -> Verified:
    """Check an archive read once, front to back, from ``source`` (anything with ``read(n)``: the
    object store's GET stream) against ``files``, exactly as :func:`verify_archive` checks a
    stored file: the same member rules, sizes, sha256s, offsets, ``manifest.json`` and trailer.

    A ``tar``'s headers are walked by :mod:`tarfile` over a forward-only view of the stream
    (:class:`_Forward`); each member's data is hashed here in 4 MiB reads as it passes, every
    byte feeds the archive's sha256 once, and the last ``TRAILER_MAX_BYTES`` are kept to check
    that only zeros follow the last member. A ``tar.gz`` goes through :func:`verify_stream`.
    Memory: a few blocks, whatever the size.

    Raises:
        BundleInvalid: the first difference found, naming the file.
    """
    head = _Limited(source, size).read(2) if size else b""
    rest = _Limited(source, size - len(head))
    if head == GZIP_MAGIC:
        reader = TeeReader(_Prefixed(head, rest))
        verify_stream(reader, files)
        if reader.size != size:
            raise BundleInvalid(f"{reader.size} bytes in the archive, {size} announced")
        return Verified(reader.digest.hexdigest(), "tar.gz")
    reader = _Forward(_Prefixed(head, rest), size, keep=TRAILER_MAX_BYTES + 1)
    claimed = _claimed(files)
    offsets: dict[str, int] = {}
    manifest: bytes | None = None
    try:
        with tarfile.open(fileobj=reader, mode="r:") as tar:  # type: ignore[call-overload]
            for member in tar:
                name = _member_name(member)
                if name is None:
                    continue
                entry = _member_entry(name, member, size, offsets, claimed)
                reader.seek(member.offset_data)
                if entry is None:
                    manifest = reader.read(member.size)
                    continue
                _check_sha256(name, reader.sha256_next(member.size), entry)
                offsets[name] = member.offset_data
            end = tar.offset
        reader.finish()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, BundleInvalid):
            raise
        raise BundleInvalid(f"not a readable tar: {exc}") from None
    if size - end > TRAILER_MAX_BYTES or bytes(reader.tail[len(reader.tail) - (size - end):]).strip(b"\0"):
        raise BundleInvalid(f"data after the end of the archive (from byte {end}): an unreadable header "
                            "or bytes that are no member")
    _check_complete(claimed, set(offsets) | ({MANIFEST} if manifest is not None else set()), manifest, files,
                    offsets)
    return Verified(reader.digest.hexdigest(), "tar", offsets)


class _Forward:
    """A read-once stream of ``size`` bytes made to look seekable for :mod:`tarfile` (``r:``): a seek
    forward reads (and hashes) the bytes skipped, a seek back may go as far as the last ``keep``
    bytes read (kept in :attr:`tail`). Every byte of the stream feeds :attr:`digest` exactly
    once, in order. Raises OSError for a seek further back."""

    def __init__(self, source: Any, size: int, keep: int) -> None:
        self.source, self.size, self.keep = source, size, keep
        self.digest = hashlib.sha256()
        self.pos = 0  # where the next read starts
        self.got = 0  # bytes taken from the source
        self.tail = bytearray()  # the last ``keep`` bytes taken, ending at ``got``

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        pos = pos + (self.pos if whence == 1 else self.size if whence == 2 else 0)
        if pos < self.got - len(self.tail):
            raise OSError(f"cannot go back to byte {pos} of a stream read up to {self.got}")
        self.pos = pos
        return pos

    def _take(self, n: int) -> bytes:
        data = self.source.read(min(n, self.size - self.got)) if self.got < self.size else b""
        if data:
            self.digest.update(data)
            self.got += len(data)
            if len(data) >= self.keep:
                self.tail = bytearray(data[-self.keep:])
            else:
                self.tail += data
                del self.tail[: max(0, len(self.tail) - self.keep)]
        return data

    def _skip_to_pos(self) -> None:
        while self.got < self.pos:
            if not self._take(min(READ_BYTES, self.pos - self.got)):
                raise BundleInvalid("the archive ends inside a member's data")

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else n
        out = []
        if self.pos < self.got and n > 0:
            start = len(self.tail) - (self.got - self.pos)
            piece = bytes(self.tail[start:start + n])
            out.append(piece)
            self.pos += len(piece)
            n -= len(piece)
        self._skip_to_pos()
        while n > 0:
            data = self._take(min(n, READ_BYTES))
            if not data:
                break
            out.append(data)
            self.pos += len(data)
            n -= len(data)
        return b"".join(out)

    def sha256_next(self, length: int) -> str:
        """Hex sha256 of the next ``length`` bytes from :meth:`tell` (read in 4 MiB blocks, not kept).

        Raises:
            BundleInvalid: the stream ends first.
        """
        digest = hashlib.sha256()
        while length > 0:
            data = self.read(min(length, READ_BYTES))
            if not data:
                raise BundleInvalid("the archive ends inside a member's data")
            digest.update(data)
            length -= len(data)
        return digest.hexdigest()

    def finish(self) -> None:
        """Read the rest of the stream (hashed; its last ``keep`` bytes kept)."""
        self.pos = max(self.pos, self.got)
        while self._take(READ_BYTES):
            self.pos = self.got
        if self.got != self.size:
            raise BundleInvalid(f"{self.got} bytes in the archive, {self.size} announced")


class _Prefixed:
    """``head`` then what ``rest`` reads (the bytes peeked to tell a tar.gz from a tar)."""

    def __init__(self, head: bytes, rest: Any) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if self.head:
            data, self.head = (self.head, b"") if n < 0 or n >= len(self.head) else (self.head[:n], self.head[n:])
            return data
        return self.rest.read(n)


def _walk(fh: IO[bytes], size: int, claimed: dict[str, dict[str, Any]]) -> tuple[dict[str, int], bytes | None]:
    """Every member of the tar in ``fh`` checked and its data hashed; (offsets, manifest bytes)."""
    fd = fh.fileno()
    offsets: dict[str, int] = {}
    manifest: bytes | None = None
    buf = bytearray(READ_BYTES)
    try:
        with tarfile.open(fileobj=fh, mode="r:") as tar:  # type: ignore[call-overload]
            for member in tar:
                name = _member_name(member)
                if name is None:
                    continue
                entry = _member_entry(name, member, size, offsets, claimed)
                if entry is None:
                    manifest = os.pread(fd, member.size, member.offset_data)
                    continue
                _check_sha256(name, _sha256_range(fd, member.offset_data, member.size, buf), entry)
                offsets[name] = member.offset_data
            _check_trailer(fd, tar.offset, size)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, BundleInvalid):
            raise
        raise BundleInvalid(f"not a readable tar: {exc}") from None
    return offsets, manifest



def _member_entry(name: str, member: tarfile.TarInfo, size: int, offsets: dict[str, int],
                  claimed: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The manifest entry archive member ``name`` claims to be, or None for the manifest itself.

    Raises:
        BundleInvalid: its data runs past the archive's ``size`` (bytes), the manifest is over
            ``MANIFEST_MAX_BYTES``, the member appears twice or is not in the manifest, or its size
            differs from the manifest's.
    """
    if member.offset_data + member.size > size:
        raise BundleInvalid(f"archive member {name!r}: its data runs past the end of the archive")
    if name == MANIFEST:
        if member.size > MANIFEST_MAX_BYTES:
            raise BundleInvalid(f"{MANIFEST} in the archive is over {MANIFEST_MAX_BYTES} bytes")
        return None
    if name in offsets:
        raise BundleInvalid(f"archive member {name!r} appears twice")
    entry = claimed.get(name)
    if entry is None:
        raise BundleInvalid(f"archive member {name!r} is not in the manifest")
    if member.size != entry["size_bytes"]:
        raise BundleInvalid(f"{name}: {member.size} bytes in the archive, {entry['size_bytes']} in the manifest")
    return entry


def _check_sha256(name: str, digest: str, entry: dict[str, Any]) -> None:
    """Raises BundleInvalid when ``digest`` (hex) is not the manifest entry's sha256."""
    if digest != str(entry["sha256"]).lower():
        raise BundleInvalid(f"{name}: sha256 in the archive differs from the manifest")

def _member_name(member: tarfile.TarInfo) -> str | None:
    """The member's checked name; None for a directory (skipped)."""
    if member.isdir():
        return None
    name = posixpath.normpath(member.name) if member.name not in ("", ".") else "."
    if not _safe_name(member.name) or name != member.name.rstrip("/"):
        raise BundleInvalid(f"archive member {member.name!r}: not a plain relative path")
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.sparse is not None:
        raise BundleInvalid(f"archive member {member.name!r}: not a regular file")
    return name


def _check_trailer(fd: int, end: int, size: int) -> None:
    """Only zeros (the end-of-archive marker and record padding) from ``end`` to ``size``."""
    if size - end > TRAILER_MAX_BYTES or os.pread(fd, size - end, end).strip(b"\0"):
        raise BundleInvalid(f"data after the end of the archive (from byte {end}): an unreadable header "
                            "or bytes that are no member")


def _sha256_range(fd: int, start: int, length: int, buf: bytearray) -> str:
    """Hex sha256 of ``length`` bytes of ``fd`` from ``start`` (positioned reads into ``buf``)."""
    digest = hashlib.sha256()
    view = memoryview(buf)
    while length > 0:
        n = os.preadv(fd, [view[: min(len(buf), length)]], start)
        if n <= 0:
            raise BundleInvalid("the archive ends inside a member's data")
        digest.update(view[:n])
        start += n
        length -= n
    return digest.hexdigest()


def _sha256_of(fd: int, size: int, stop: threading.Event) -> str:
    """Hex sha256 of the first ``size`` bytes of ``fd``; given up (``""``) once ``stop`` is set."""
    digest = hashlib.sha256()
    buf = bytearray(READ_BYTES)
    view = memoryview(buf)
    offset = 0
    while offset < size and not stop.is_set():
        n = os.preadv(fd, [view[: min(len(buf), size - offset)]], offset)
        if n <= 0:
            break
        digest.update(view[:n])
        offset += n
    return digest.hexdigest() if offset == size else ""


def _claimed(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    claimed = {f["path"]: f for f in files}
    if len(claimed) != len(files):
        raise BundleInvalid("the manifest lists a path twice")
    return claimed


def _check_complete(claimed: dict[str, dict[str, Any]], seen: set[str], manifest: bytes | None,
                    files: list[dict[str, Any]], offsets: dict[str, int]) -> None:
    """Every listed file found; offsets sent (if any) right; the manifest inside the same as the one sent."""
    missing = sorted(set(claimed) - seen)
    if missing:
        raise BundleInvalid(f"{missing[0]}: in the manifest but not in the archive"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    for f in files:
        if f.get("offset") is not None and offsets and f["offset"] != offsets[f["path"]]:
            raise BundleInvalid(f"{f['path']}: its data is at byte {offsets[f['path']]} of the archive, "
                                f"not {f['offset']} as the manifest says")
    if manifest is not None:
        try:
            listed = json.loads(manifest)["files"]
            inner = {(f["path"], f["size_bytes"], str(f["sha256"]).lower()) for f in listed}
            inner_offsets = {f["path"]: f["offset"] for f in listed if f.get("offset") is not None}
        except (ValueError, KeyError, TypeError) as exc:
            raise BundleInvalid(f"manifest.json in the archive is unreadable: {exc}") from None
        if inner != {(f["path"], f["size_bytes"], str(f["sha256"]).lower()) for f in files}:
            raise BundleInvalid("manifest.json in the archive differs from the manifest sent")
        if offsets and any(offsets.get(p) != o for p, o in inner_offsets.items()):
            raise BundleInvalid("manifest.json in the archive gives offsets that are not where the files are")


class _Limited:
    """At most ``size`` bytes of ``raw`` (what was received, never more)."""

    def __init__(self, raw: Any, size: int):
        self.raw = raw
        self.left = size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        data = self.raw.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return data
