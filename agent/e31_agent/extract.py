"""Unpacking ``.tar``, ``.tar.gz``/``.tgz`` (and other tar compressions) and ``.zip``
into a directory, with no entry landing outside it."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

from .paths import UnsafePath, check_relative, is_within


class ExtractError(ValueError):
    """An archive that cannot be unpacked safely (or at all)."""


def safe_extract(archive: Path, dest: Path) -> int:
    """Unpack ``archive`` into ``dest``; returns the bytes written.

    Refused, before anything is written: absolute entry names, ``..`` parts,
    links whose target is absolute or leads out of ``dest``, device files.
    Tar archives then go through Python's ``data`` filter as a second guard.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        return _extract_zip(archive, dest)
    if tarfile.is_tarfile(archive):
        return _extract_tar(archive, dest)
    raise ExtractError(f"{archive.name}: not a tar or zip archive")


def _check_name(name: str) -> None:
    try:
        check_relative(name)
    except UnsafePath as exc:
        raise ExtractError(f"archive entry {exc}") from None


def _extract_tar(archive: Path, dest: Path) -> int:
    root = os.path.realpath(dest)
    total = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
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


def _extract_zip(archive: Path, dest: Path) -> int:
    total = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            for info in infos:
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
                    shutil.copyfileobj(src, out, 1 << 20)
                total += info.file_size
    except (zipfile.BadZipFile, OSError) as exc:
        raise ExtractError(f"{archive.name}: cannot unpack: {exc}") from None
    return total


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
