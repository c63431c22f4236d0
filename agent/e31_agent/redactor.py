"""Replacing secret values in a job's output before it reaches the log file (issue 23).

The shim (:mod:`e31_agent.shim`) runs each of the command's streams through a :class:`Redactor`
before it writes to the log, so a value never lands on the node's disk nor leaves the node with the
log (:mod:`e31_agent.logship` ships what the file holds). Every occurrence of a value of at least
:data:`MIN_CHARS` characters becomes ``[secret NAME]``. A value split across two reads of a pipe is
caught too: the end of a read that could be the start of a value is held back until the next read
(or the end of the stream) says whether it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MIN_CHARS = 6  # shorter values are left alone: they would hit ordinary words (SPEC §2)


class Redactor:
    """A streaming replacer of ``{name: value}`` in bytes (values as UTF-8)."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        pairs = {value.encode("utf-8"): f"[secret {name}]".encode() for name, value in secrets.items()
                 if len(value) >= MIN_CHARS}
        self._values = sorted(pairs, key=len, reverse=True)  # longest first: a value inside another
        self._names = pairs
        self._pattern = re.compile(b"|".join(re.escape(v) for v in self._values)) if pairs else None
        self._pending = b""

    @property
    def active(self) -> bool:
        """True when there is at least one value to replace."""
        return self._pattern is not None

    def feed(self, data: bytes) -> bytes:
        """What may be written of ``data`` now (values replaced); a possible start of a value is kept."""
        if self._pattern is None:
            return data
        buf = self._pending + data
        out, pos = [], 0
        for match in self._pattern.finditer(buf):
            out += [buf[pos:match.start()], self._names[match.group()]]
            pos = match.end()
        rest = buf[pos:]
        held = self._held(rest)
        self._pending = rest[len(rest) - held:] if held else b""
        out.append(rest[:len(rest) - held])
        return b"".join(out)

    def flush(self) -> bytes:
        """The held-back end (the stream ended: it was no value)."""
        rest, self._pending = self._pending, b""
        return rest

    def _held(self, rest: bytes) -> int:
        """The length of the longest end of ``rest`` that is the start of a value (shorter than it)."""
        best = 0
        for value in self._values:
            first = value[:1]
            start = max(0, len(rest) - len(value) + 1)
            while True:
                i = rest.find(first, start)
                if i < 0 or len(rest) - i <= best:
                    break
                if value.startswith(rest[i:]):
                    best = len(rest) - i
                    break
                start = i + 1
        return best
