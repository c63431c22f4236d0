"""Typed helpers that read settings from environment variables.

Every setting of the site comes through one of these, so the defaults that
serve standalone use live next to the name of the variable that overrides
them.
"""
from __future__ import annotations

import os

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """Return the variable ``name`` or ``default`` when it is unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """Return ``name`` read as a boolean (1/true/yes/on, 0/false/no/off).

    Raises:
        ValueError: the variable holds something else.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean")


def env_int(name: str, default: int) -> int:
    """Return ``name`` as an int.

    Raises:
        ValueError: the variable is set but not an integer.
    """
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    """Return ``name`` as a float.

    Raises:
        ValueError: the variable is set but not a number.
    """
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str] | None = None, sep: str = ",") -> list[str]:
    """Return ``name`` split on ``sep`` with blanks dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [part.strip() for part in raw.split(sep) if part.strip()]
