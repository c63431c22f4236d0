"""Per-job memory limits through cgroup v2, where the agent may manage its own cgroup.

The kernel's cgroup v2 rules (Documentation/admin-guide/cgroup-v2.rst): a
controller is enabled for children through the parent's
``cgroup.subtree_control``, and a cgroup with enabled child controllers
may hold no process itself ("no internal processes"). So, as systemd's
``Delegate=yes`` services do, the agent moves itself into a leaf
``<own cgroup>/agent``, enables ``+memory`` for its cgroup's children, and
gives each run a sibling ``<own cgroup>/job-<id>-<attempt>`` with
``memory.max`` (bytes) and ``memory.swap.max`` 0. The shim moves the
command into it before ``exec`` (it writes ``0`` to its ``cgroup.procs``).

:meth:`JobCgroups.detect` returns None where this cannot work: cgroup v1
(or a hybrid without ``memory`` on the unified tree), a cgroup the agent
may not write (no delegation), or any refusal on the way; jobs then run
without a memory cap, except on simulated nodes where ``RLIMIT_AS`` stands
in (see :func:`e31_agent.job.job_limits`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def own_cgroup(proc_cgroup: Path = Path("/proc/self/cgroup")) -> str | None:
    """This process's cgroup v2 path (``0::/path`` line), or None."""
    try:
        for line in proc_cgroup.read_text().splitlines():
            if line.startswith("0::"):
                return line[3:] or "/"
    except OSError:
        pass
    return None


class JobCgroups:
    """Creates and removes the runs' cgroups under ``base`` (the agent's own cgroup dir)."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def detect(
        cls, root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup"), pid: int | None = None
    ) -> JobCgroups | None:
        """Set up delegation for process ``pid`` (default: this one); None where it cannot."""
        try:
            controllers = (root / "cgroup.controllers").read_text().split()
        except OSError:
            return None  # no unified hierarchy: cgroup v1
        path = own_cgroup(proc_cgroup)
        if "memory" not in controllers or path is None:
            return None
        base = root / path.lstrip("/")
        try:
            if "memory" not in (base / "cgroup.controllers").read_text().split():
                return None
            leaf = base / "agent"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(pid or os.getpid()))
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if "memory" not in enabled:
                (base / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            log.info("cgroup v2 memory limits not available (%s): none for jobs", exc)
            return None
        log.info("jobs get their own cgroup under %s (memory.max)", base)
        return cls(base)

    def create(self, name: str, memory_bytes: int) -> Path:
        """A cgroup ``name`` capped at ``memory_bytes`` (no swap). Raises ``OSError``."""
        path = self.base / name
        path.mkdir(exist_ok=True)
        (path / "memory.max").write_text(str(int(memory_bytes)))
        try:
            (path / "memory.swap.max").write_text("0")
        except OSError:
            pass  # no swap accounting on this kernel
        return path

    def remove(self, path: Path) -> None:
        """Remove a run's cgroup once its processes are gone (best effort)."""
        try:
            path.rmdir()
        except OSError as exc:
            if path.exists():
                log.warning("cgroup %s not removed: %s", path, exc)
