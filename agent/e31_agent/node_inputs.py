"""What a node's staging shares across jobs: the input cache and the operator's rules
(file roots, hosts allowed to ``http(s)://`` inputs, archive and output caps).

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
from .extract import ExtractLimits
from .netguard import AddressPolicy
from .packer import OutputLimits


class FileRootError(ValueError):
    """An ``--allow-file-root`` that is not an existing directory."""


@dataclass(frozen=True)
class NodeInputs:
    """The shared cache, the directories ``file://`` sources may come from, and whether a
    cached file may be hard-linked into a job dir (only when jobs cannot write it)."""

    cache: InputCache
    file_roots: tuple[Path, ...] = ()
    hardlink_ok: bool = False
    net_policy: AddressPolicy = AddressPolicy()  # non-public hosts http(s) inputs may reach (--allow-host)
    extract_limits: ExtractLimits = ExtractLimits()  # caps of archive extraction (--extract-max-*)
    output_limits: OutputLimits = OutputLimits()  # caps of a job's outputs (--output-max-*), read by the packer


_lock = threading.Lock()
_registry: dict[Path, NodeInputs] = {}


def env_max_bytes() -> int:
    """``E31_AGENT_CACHE_MAX_BYTES`` in bytes (default 50 GB)."""
    raw = os.environ.get("E31_AGENT_CACHE_MAX_BYTES", "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_MAX_BYTES


def env_file_roots() -> list[Path]:
    """``E31_AGENT_FILE_ROOTS``: directories, ``os.pathsep``-separated."""
    return [Path(p) for p in os.environ.get("E31_AGENT_FILE_ROOTS", "").split(os.pathsep) if p.strip()]


def env_allow_hosts() -> list[str]:
    """``E31_AGENT_ALLOW_HOSTS``: host names, addresses or CIDRs, comma-separated."""
    return [h.strip() for h in os.environ.get("E31_AGENT_ALLOW_HOSTS", "").split(",") if h.strip()]


def check_file_roots(roots: list[Path]) -> tuple[Path, ...]:
    """The roots, resolved. Raises :class:`FileRootError` for one that is not an existing directory."""
    out = []
    for root in roots:
        real = Path(os.path.realpath(root.expanduser()))
        if not real.is_dir():
            raise FileRootError(f"{root}: not an existing directory")
        out.append(real)
    return tuple(out)


def configure(cache_dir: Path, *, max_bytes: int, file_roots: list[Path], hardlink_ok: bool = False,
              allow_hosts: list[str] | tuple[str, ...] = (), extract_limits: ExtractLimits | None = None,
              output_limits: OutputLimits | None = None) -> NodeInputs:
    """Set up (or replace) the node's inputs for ``cache_dir``.

    Raises :class:`FileRootError`, or ``ValueError`` for a bad ``allow_hosts`` entry.
    """
    roots = check_file_roots(file_roots)
    policy = AddressPolicy.parse(list(allow_hosts))
    with _lock:
        inputs = NodeInputs(InputCache(cache_dir, max_bytes=max_bytes), roots, hardlink_ok, policy,
                            extract_limits or ExtractLimits.from_env(), output_limits or OutputLimits.from_env())
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
            try:
                policy = AddressPolicy.parse(env_allow_hosts())
            except ValueError:
                policy = AddressPolicy()
            inputs = NodeInputs(InputCache(cache_dir, max_bytes=env_max_bytes()), roots,
                                net_policy=policy, extract_limits=ExtractLimits.from_env(),
                                output_limits=OutputLimits.from_env())
            _registry[key] = inputs
        return inputs
