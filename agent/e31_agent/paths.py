"""Keeping every path the agent writes or reads inside the job dir."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath


class UnsafePath(ValueError):
    """A path that would leave the directory it must stay in."""


def is_within(path: str | os.PathLike[str], base: str | os.PathLike[str]) -> bool:
    """True when ``path``, links resolved, is ``base`` or lies under it."""
    real = os.path.realpath(path)
    root = os.path.realpath(base)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def check_relative(rel: str) -> PurePosixPath:
    """Refuse absolute paths, ``..`` parts and NUL; returns the cleaned path."""
    if "\x00" in rel:
        raise UnsafePath(f"{rel!r}: NUL in path")
    if rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":"):
        raise UnsafePath(f"{rel!r}: absolute path")
    pure = PurePosixPath(rel.replace("\\", "/"))
    if ".." in pure.parts:
        raise UnsafePath(f"{rel!r}: '..' is not allowed")
    return pure


def resolve_inside(base: Path, rel: str) -> Path:
    """``base / rel``, refusing anything that would land outside ``base``.

    Checks the text (no absolute path, no ``..``) and, since a link already
    in ``base`` could point out, the resolved location as well.
    """
    pure = check_relative(rel)
    path = base.joinpath(*pure.parts) if pure.parts else base
    if not is_within(path, base):
        raise UnsafePath(f"{rel!r}: resolves outside the job dir")
    return path


def remove_tree(path: Path) -> None:
    """Remove a directory tree, also where the job took its own write permission away."""

    def retry(func: Callable[[str], object], target: str, _exc: object) -> None:
        try:
            parent = os.path.dirname(target)
            os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
            func(target)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=retry)  # Python 3.11: no onexc yet
