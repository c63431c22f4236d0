"""Exit codes and the one error type every command raises.

The exit code tells a script what happened without reading the output
(documented in ``cli/README.md`` and ``e31 --help``):

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success (for ``status`` and ``submit --watch``: the job succeeded)
1     the job ended without success (failed, cancelled, timed_out, node_lost)
2     usage error: bad arguments, a missing file, no URL or token configured
3     the job has not ended yet (``status``), or has no bundle yet (``get``)
4     the server refused the request (400 and other 4xx): errors field by field
5     authentication refused (401/403): a wrong, revoked or missing token
6     not found (404): no such job, or not yours
7     the server cannot be reached (connection refused, DNS, timeout)
8     the server failed (5xx) or answered something that is not the API
9     a downloaded bundle or file failed its sha256 check
130   interrupted (Ctrl-C)
====  ==========================================================================
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any


class Exit(IntEnum):
    """Process exit codes of ``e31``."""

    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    PENDING = 3
    INVALID = 4
    AUTH = 5
    NOT_FOUND = 6
    NETWORK = 7
    SERVER = 8
    VERIFY = 9
    INTERRUPTED = 130


class CliError(Exception):
    """An error to show the user (never as a traceback) and exit with ``code``.

    Attributes:
        message: one line saying what went wrong and, where it helps, what to do.
        code: the process exit code.
        fields: ``{"field.path": ["message", ...]}`` from the API (400), else empty.
        status: the HTTP status when the error came from the server, else None.
        extra: more keys of the ``--json`` error (a pipeline stopped midway: what was submitted).
    """

    def __init__(self, message: str, code: Exit, *, fields: dict[str, list[str]] | None = None,
                 status: int | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.fields = fields or {}
        self.status = status
        self.extra = extra or {}

    def to_json(self) -> dict[str, Any]:
        """``{"error": {"message", "code", "status", "fields", ...extra}}`` for ``--json`` output."""
        return {"error": {"message": self.message, "code": int(self.code), "status": self.status,
                          "fields": self.fields, **self.extra}}


def usage(message: str) -> CliError:
    """A usage error (exit 2)."""
    return CliError(message, Exit.USAGE)
