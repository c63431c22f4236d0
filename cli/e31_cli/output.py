"""How ``e31`` prints: rich tables and messages for people, one JSON document for ``--json``.

Data goes to stdout; progress, notices and errors go to stderr, so ``e31 logs 7 > run.log``
keeps only the log. With ``--json`` errors are a JSON document on stdout too
(``{"error": {...}}``), so a script reads one place.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import CliError

OUTCOME_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "timed_out": "red",
                 "node_lost": "red"}


class Out:
    """The printer of one command run.

    Args:
        json_mode: print one JSON document (``emit``) instead of tables and messages.
        quiet: print only what :meth:`ids` prints (``submit -q``: ids for a script).
    """

    def __init__(self, json_mode: bool = False, *, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.console = Console(highlight=False, width=_width(sys.stdout))
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def emit(self, data: Any) -> None:
        """One JSON document on stdout (``--json``)."""
        sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")
        sys.stdout.flush()

    def line(self, data: Any) -> None:
        """One compact JSON line on stdout (streams: ``logs --json -f``)."""
        sys.stdout.write(json.dumps(data, default=str) + "\n")
        sys.stdout.flush()

    def ids(self, ids: Iterable[int]) -> None:
        """Job ids on stdout, one a line (``-q``)."""
        sys.stdout.write("".join(f"{i}\n" for i in ids))
        sys.stdout.flush()

    def print(self, text: str) -> None:
        """Rich text on stdout (people only; ignored with ``--json`` and ``-q``)."""
        if not self.json_mode and not self.quiet:
            self.console.print(text)

    def note(self, text: str) -> None:
        """A notice on stderr (people only; ignored with ``--json`` and ``-q``)."""
        if not self.json_mode and not self.quiet:
            self.err.print(text)

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, header: bool = True) -> None:
        """A table on stdout; cells are rich markup (escape user text with :func:`cell`)."""
        table = Table(*columns, box=None, header_style="bold", pad_edge=False, show_header=header)
        for row in rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        self.console.print(table)

    def error(self, exc: CliError) -> None:
        """The error, field by field: JSON on stdout with ``--json``, else lines on stderr."""
        if self.json_mode:
            self.emit(exc.to_json())
            return
        self.err.print(f"[bold red]error:[/] {escape(exc.message)}")  # shown even with -q
        for field, messages in exc.fields.items():
            for message in messages:
                self.err.print(f"  [bold]{escape(field)}[/]: {escape(message)}")


def _width(stream: Any) -> int | None:
    """Rich's own width on a terminal; elsewhere (a pipe, a file) ``$COLUMNS`` or 200, so that
    tables are not squeezed into 80 columns."""
    if stream.isatty():
        return None
    try:
        return max(40, int(os.environ.get("COLUMNS", "200")))
    except ValueError:
        return 200


def cell(value: Any) -> str:
    """User text made safe for rich markup."""
    return "" if value is None else escape(str(value))


def when(value: str | None) -> str:
    """An API time (ISO 8601) as local ``YYYY-MM-DD HH:MM:SS``; empty for None."""
    if not value:
        return ""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value


def duration(seconds: float | int | None) -> str:
    """Seconds as ``1h02m03s`` / ``4m05s`` / ``7s``."""
    if seconds is None:
        return ""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def state_text(job: dict[str, Any]) -> str:
    """``released · succeeded`` with the outcome coloured; the state alone before release."""
    state = job.get("state") or ""
    outcome = job.get("outcome")
    if not outcome:
        return cell(state)
    return f"{cell(state)} · [{OUTCOME_STYLE.get(outcome, 'white')}]{cell(outcome)}[/]"


def outcome_text(job: dict[str, Any]) -> str:
    """:func:`state_text` with, once released, the reason in the job page's words (its
    ``status_message``): ``released · failed (command exited with code 3)``. A success has none."""
    text = state_text(job)
    reason = job.get("status_message") if job.get("state") == "released" else ""
    return f"{text} ({cell(reason)})" if reason else text


def money(value: str | float | None) -> str:
    """A cost as the pages show it, in dollars to the cent (SPEC §4): ``"0.005375"`` -> ``$0.01``;
    ``""`` for none. The API keeps 6 places (``--json`` prints them as they are)."""
    if value in (None, ""):
        return ""
    try:
        amount = Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    except (InvalidOperation, ValueError):
        return str(value)
    return f"${amount}"


def size(n: int | None) -> str:
    """Bytes in B, KB, MB, GB (10^3 steps, as SPEC §2 counts GB)."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"
