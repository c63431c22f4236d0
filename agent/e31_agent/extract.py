"""Unpacking ``.tar``, ``.tar.gz``/``.tgz`` (and other tar compressions) and ``.zip``
into a directory, with no entry landing outside it, and within caps (:class:`ExtractLimits`)
so a small archive cannot fill the node's disk (a "decompression bomb")."""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .paths import UnsafePath, check_relative, is_within


class ExtractError(ValueError):
    """An archive that cannot be unpacked safely (or at all)."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().replace("_", "")
    return int(raw) if raw.isdigit() else default


@dataclass(frozen=True)
class ExtractLimits:
    """Caps on what one archive may unpack to (agent flags ``--extract-max-*``, or
    ``$E31_AGENT_EXTRACT_MAX_BYTES`` / ``_MEMBERS`` / ``_RATIO``).

    ``max_bytes``: unpacked bytes (default 100 GiB); ``max_members``: entries
    (default 1,000,000); ``max_ratio``: unpacked bytes per archive byte (default
    200; text compresses 5-20 times, a bomb a thousand and more). The ratio is
    only checked past ``ratio_floor`` unpacked bytes (default 64 MiB), so a tiny
    archive of zeros is fine.
    """

    max_bytes: int = 100 * 1024**3
    max_members: int = 1_000_000
    max_ratio: float = 200.0
    ratio_floor: int = 64 * 1024**2

    @classmethod
    def from_env(cls) -> ExtractLimits:
        return cls(max_bytes=_env_int("E31_AGENT_EXTRACT_MAX_BYTES", cls.max_bytes),
                   max_members=_env_int("E31_AGENT_EXTRACT_MAX_MEMBERS", cls.max_members),
                   max_ratio=float(_env_int("E31_AGENT_EXTRACT_MAX_RATIO", int(cls.max_ratio))))


class _Budget:
    """Running totals of one extraction against :class:`ExtractLimits`."""

    def __init__(self, limits: ExtractLimits, archive_bytes: int) -> None:
        self.limits = limits
        self.archive_bytes = max(1, archive_bytes)
        self.members = 0
        self.bytes = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ExtractError(f"the archive has more than {self.limits.max_members:,} entries, the cap of"
                               " this node (--extract-max-members)")

    def add(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.limits.max_bytes:
            raise ExtractError(f"the archive unpacks to more than {self.limits.max_bytes:,} bytes, the cap of"
                               " this node (--extract-max-bytes)")
        ratio = self.bytes / self.archive_bytes
        if self.bytes > self.limits.ratio_floor and ratio > self.limits.max_ratio:
            raise ExtractError(f"the archive unpacks to more than {self.limits.max_ratio:g} times its size"
                               f" ({self.archive_bytes:,} bytes to over {self.bytes:,}): refused as a"
                               " decompression bomb (--extract-max-ratio)")


def safe_extract(archive: Path, dest: Path, *, limits: ExtractLimits | None = None) -> int:
    """Unpack ``archive`` into ``dest``; returns the bytes written.

    Refused, before anything is written: absolute entry names, ``..`` parts,
    links whose target is absolute or leads out of ``dest``, device files, and
    an archive past ``limits`` (entries, unpacked bytes, ratio; tar: counted
    from the headers before anything is written; zip: counted while writing,
    since a zip's sizes can lie). Tar archives then go through Python's
    ``data`` filter as a second guard.
    """
    limits = limits or ExtractLimits.from_env()
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        return _extract_zip(archive, dest, limits)
    if tarfile.is_tarfile(archive):
        return _extract_tar(archive, dest, limits)
    raise ExtractError(f"{archive.name}: not a tar or zip archive")


def _check_name(name: str) -> None:
    try:
        check_relative(name)
    except UnsafePath as exc:
        raise ExtractError(f"archive entry {exc}") from None


def _extract_tar(archive: Path, dest: Path, limits: ExtractLimits) -> int:
    root = os.path.realpath(dest)
    total = 0
    budget = _Budget(limits, archive.stat().st_size)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = []
            for member in tar:  # one header at a time: a bomb stops at the cap, not after unpacking it all
                members.append(member)
                budget.member()
                budget.add(member.size if member.isfile() else 0)
                _check_name(member.name)
                if member.isdev() or member.isfifo():
                    raise ExtractError(f"archive entry {member.name!r}: device or fifo")
                if member.issym():
                    target = member.linkname
                    if os.path.isabs(target):
                        raise ExtractError(
                            f"archive entry {member.name!r}: link to absolute path {target!r}"
                        )
                    where = os.path.join(root, os.path.dirname(member.name), target)
                    if not _under(os.path.normpath(where), root):
                        raise ExtractError(
                            f"archive entry {member.name!r}: link {target!r} leads outside"
                            " the target"
                        )
                elif member.islnk():
                    _check_name(member.linkname)
                total += member.size if member.isfile() else 0
            tar.extractall(dest, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise ExtractError(f"archive entry refused: {exc}") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ExtractError(f"{archive.name}: cannot unpack: {exc}") from None
    return total


def _extract_zip(archive: Path, dest: Path, limits: ExtractLimits) -> int:
    total = 0
    budget = _Budget(limits, archive.stat().st_size)
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            declared = _Budget(limits, archive.stat().st_size)
            for info in infos:
                budget.member()
                declared.add(info.file_size)  # refused before writing when the sizes it admits are past a cap
                _check_name(info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise ExtractError(
                        f"archive entry {info.filename!r}: links are not unpacked from zip"
                    )
            for info in infos:
                path = dest.joinpath(*info.filename.replace("\\", "/").split("/"))
                # checked before any directory is made: a link already in dest must not lead out
                if not is_within(path, dest):
                    raise ExtractError(f"archive entry {info.filename!r} leads outside the target")
                if info.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                if not is_within(path, dest):
                    raise ExtractError(f"archive entry {info.filename!r} leads outside the target")
                with zf.open(info) as src, open(path, "wb") as out:
                    while block := src.read(1 << 20):  # counted as written: a zip's declared sizes can lie
                        budget.add(len(block))
                        out.write(block)
                total += info.file_size
    except (zipfile.BadZipFile, OSError) as exc:
        raise ExtractError(f"{archive.name}: cannot unpack: {exc}") from None
    return total


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
