"""Units every layer shares: durations (seconds) and memory (MiB inside, GB at the edges).

Inside the server memory is MiB (2**20 bytes), the unit NVML reports GPU memory in; a spec's
``gpu_memory_gb`` and ``memory_gb`` are GB (10**9 bytes, SPEC §2), converted once at submit
(:func:`gb_to_mib`) and back only to show a figure (:func:`mib_to_gb`).
"""
from __future__ import annotations

import math
import re

DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MAX_TIME_LIMIT_S = 10 * 365 * 86400  # a sanity bound; the operator maximum is checked later
GB = 1_000_000_000  # bytes (SI), the spec's unit
MIB = 1 << 20  # bytes, the unit of memory inside the server


def parse_duration(value: int | str) -> int:
    """Return a time limit in seconds from ``"90s"``, ``"45m"``, ``"1h30m"``, ``"2d"`` or an int.

    Raises:
        ValueError: not a positive duration in that form.
    """
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 90s, 45m, 8h, 1h30m, 2d, or seconds")
    if isinstance(value, int):
        seconds = value
    else:
        text = value.strip().lower()
        if text.isdigit():
            seconds = int(text)
        else:
            match = DURATION.fullmatch(text)
            if not text or not match:
                raise ValueError("must be a duration such as 90s, 45m, 8h, 1h30m, 2d, or seconds")
            d, h, m, s = (int(g or 0) for g in match.groups())
            seconds = ((d * 24 + h) * 60 + m) * 60 + s
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    if seconds > MAX_TIME_LIMIT_S:
        raise ValueError("is far too long")
    return seconds


def format_duration(seconds: int) -> str:
    """Render seconds as ``1h30m`` / ``45m`` / ``90s`` (inverse of :func:`parse_duration`)."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def gb_to_mib(gb: float | None) -> int:
    """``gb`` GB (10**9 bytes) as whole MiB, rounded up so a minimum is never understated; 0 for None/0."""
    if not gb:
        return 0
    return math.ceil(round(gb * GB) / MIB)


def mib_to_gb(mib: int) -> float:
    """``mib`` MiB as GB (10**9 bytes) to one decimal, for messages: ``mib_to_gb(gb_to_mib(80)) == 80``."""
    return round(mib * MIB / GB, 1)


def bytes_to_mib(size: int) -> int:
    """``size`` bytes as whole MiB, rounded down (what a node has is never overstated)."""
    return size // MIB
