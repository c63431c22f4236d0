"""What a reader asks of a job's log (API ``GET /jobs/{id}/logs/`` and the log pages), checked.

Shared by :mod:`apps.jobs.api.views` and :mod:`apps.web.jobs.views`, so both refuse the same
input with the same words. Bounds: a text read covers at most ``TEXT_LIMIT_MAX`` bytes, a page
of lines at most ``LINES_LIMIT_MAX`` lines; a search text is at most ``Q_MAX_CHARS`` characters.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .models import Job

TEXT_LIMIT_DEFAULT = 1024 * 1024
TEXT_LIMIT_MAX = 4 * 1024 * 1024
LINES_LIMIT_DEFAULT = 500
LINES_LIMIT_MAX = 5000
Q_MAX_CHARS = 200
STREAMS = ("stdout", "stderr")


class LogQueryError(ValueError):
    """A parameter is not acceptable: ``field`` names it, ``message`` says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class LogQuery:
    """A checked log request.

    ``lines``: True for a page of lines (JSON), False for raw text. ``offset``/``limit``: bytes
    for text; lines for a page (``offset`` None: the last page). ``stream``: "stdout", "stderr"
    or "" (both). ``q``: literal text to search for ("" none).
    """

    attempt: int
    rank: int
    lines: bool
    offset: int | None
    limit: int
    stream: str
    q: str


def _int(params: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = params.get(name, "")
    if raw == "" or raw is None:
        return default
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise LogQueryError(name, "Must be an integer.") from None


def log_query_parse(params: Mapping[str, str], job: Job, *, lines: bool | None = None) -> LogQuery:
    """Check ``params`` (``attempt``, ``rank``, ``format`` text|lines, ``offset``, ``limit``,
    ``stream``, ``q``) against ``job``. ``lines`` forces the format (the pages use lines).
    A search (``q``) is always a page of lines.

    Raises:
        LogQueryError: a parameter out of range or of the wrong kind (never for an offset past
            the end of a page of lines: that is an empty page).
    """
    attempt = _int(params, "attempt", job.attempt)
    if not 1 <= attempt <= max(1, job.attempt):
        raise LogQueryError("attempt", f"Must be between 1 and {max(1, job.attempt)}.")
    rank = _int(params, "rank", 0)
    if not 0 <= rank < job.nodes:
        raise LogQueryError("rank", f"Must be between 0 and {job.nodes - 1}.")
    fmt = params.get("format", "") or ""
    if fmt not in ("", "text", "lines"):
        raise LogQueryError("format", "Must be text or lines.")
    stream = params.get("stream", "") or ""
    if stream not in ("", *STREAMS):
        raise LogQueryError("stream", "Must be stdout or stderr.")
    q = params.get("q", "") or ""
    if len(q) > Q_MAX_CHARS:
        raise LogQueryError("q", f"At most {Q_MAX_CHARS} characters.")
    if "\x00" in q:
        raise LogQueryError("q", "Must not hold a NUL character.")
    as_lines = lines if lines is not None else (fmt == "lines" or bool(q))
    if as_lines:
        offset = _int(params, "offset", None)
        limit = _int(params, "limit", LINES_LIMIT_DEFAULT)
        top = LINES_LIMIT_MAX
    else:
        offset = _int(params, "offset", 0)
        limit = _int(params, "limit", TEXT_LIMIT_DEFAULT)
        top = TEXT_LIMIT_MAX
    if offset is not None and offset < 0:
        raise LogQueryError("offset", "Must be 0 or more.")
    if not 1 <= limit <= top:
        raise LogQueryError("limit", f"Must be between 1 and {top}.")
    return LogQuery(attempt, rank, as_lines, offset, limit, stream, q)
