"""Free disk space before a step writes (issue 26 item 4): staging and packing refuse at once,
with both figures, rather than fill the node's disk half way and leave a broken file behind."""

from __future__ import annotations

import shutil
from pathlib import Path

SPACE_MARGIN_BYTES = 16 * 1024 * 1024  # left free on the node's disk beyond what a step writes


class NoSpace(OSError):
    """The step does not fit: ``str()`` says how much it needs and how much is free."""


def space_check(directory: Path, need_bytes: int, *, what: str) -> None:
    """Refuse a step that would write ``need_bytes`` into ``directory``'s file system when fewer
    than that plus :data:`SPACE_MARGIN_BYTES` are free.

    Raises:
        NoSpace: "no space left on the node to pack the outputs: need 1.20 GB, free 0.30 GB".
    """
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if need_bytes + SPACE_MARGIN_BYTES > free:
        raise NoSpace(f"no space left on the node {what}: need {_size(need_bytes)}, free {_size(free)}; "
                      "nothing was written")


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 10**8 else f"{n / 1e6:.1f} MB"
