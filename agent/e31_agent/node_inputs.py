"""What a node's staging shares across jobs: the input cache and the operator's rules.

One :class:`NodeInputs` per work directory, made once by :func:`configure`
(the agent, from its command line) or on first use by :func:`for_workdir`
with the defaults from the environment (``E31_AGENT_CACHE_MAX_BYTES``,
``E31_AGENT_FILE_ROOTS``, a ``os.pathsep``-separated list), so every job
thread and the pre-stager use the same cache object and its locks.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .cache import DEFAULT_MAX_BYTES, InputCache


class FileRootError(ValueError):
    """An ``--allow-file-root`` that is not an existing directory."""


@dataclass(frozen=True)
class NodeInputs:
    """The shared cache, the directories ``file://`` sources may come from, and whether a
    cached file may be hard-linked into a job dir (only when jobs cannot write it)."""

    cache: InputCache
    file_roots: tuple[Path, ...] = ()
    hardlink_ok: bool = False


_lock = threading.Lock()
_registry: dict[Path, NodeInputs] = {}


def env_max_bytes() -> int:
    """``E31_AGENT_CACHE_MAX_BYTES`` in bytes (default 50 GB)."""
    raw = os.environ.get("E31_AGENT_CACHE_MAX_BYTES", "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_MAX_BYTES


def env_file_roots() -> list[Path]:
    """``E31_AGENT_FILE_ROOTS``: directories, ``os.pathsep``-separated."""
    return [Path(p) for p in os.environ.get("E31_AGENT_FILE_ROOTS", "").split(os.pathsep) if p.strip()]


def check_file_roots(roots: list[Path]) -> tuple[Path, ...]:
    """The roots, resolved. Raises :class:`FileRootError` for one that is not an existing directory."""
    out = []
    for root in roots:
        real = Path(os.path.realpath(root.expanduser()))
        if not real.is_dir():
            raise FileRootError(f"{root}: not an existing directory")
        out.append(real)
    return tuple(out)


def configure(cache_dir: Path, *, max_bytes: int, file_roots: list[Path], hardlink_ok: bool = False) -> NodeInputs:
    """Set up (or replace) the node's inputs for ``cache_dir``. Raises :class:`FileRootError`."""
    roots = check_file_roots(file_roots)
    with _lock:
        inputs = NodeInputs(InputCache(cache_dir, max_bytes=max_bytes), roots, hardlink_ok)
        _registry[cache_dir.resolve()] = inputs
        return inputs


def for_cache_dir(cache_dir: Path) -> NodeInputs:
    """The node's inputs for ``cache_dir``, made with the environment's defaults on first use.

    A file root from the environment that does not exist is left out.
    """
    key = cache_dir.resolve()
    with _lock:
        inputs = _registry.get(key)
        if inputs is None:
            roots = tuple(Path(os.path.realpath(r)) for r in env_file_roots() if r.is_dir())
            inputs = NodeInputs(InputCache(cache_dir, max_bytes=env_max_bytes()), roots)
            _registry[key] = inputs
        return inputs
