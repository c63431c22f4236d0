"""A job's output files on its pages (issue 16 item 2): the bundle card's rows and the preview page.

Bytes come from :mod:`apps.artifacts.files` (one file read from the stored archive at its
offset). What the page shows is built here, as plain values the templates print (escaped
by Django's autoescape; nothing here is marked safe): an image is shown by URL in ``<img>``
(an SVG there runs no script), JSON pretty-printed, CSV as a table, text as text.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from django.urls import reverse

from apps.artifacts.files import (
    PREVIEW_BYTES,
    OutputFile,
    addressable,
    bundle_files,
    decode_head,
    file_head,
)
from apps.artifacts.models import Bundle

CSV_ROWS = 100  # rows a CSV preview shows after its header row


@dataclass(frozen=True)
class FileRow:
    """One line of the bundle card: the file, its download URL, and its preview page's URL
    (None when its kind has no preview or the bundle has no offsets)."""

    path: str
    size_bytes: int
    sha256: str
    download_url: str | None
    preview_url: str | None


def _query(bundle: Bundle, *, inline: bool = False) -> str:
    parts = ([f"rank={bundle.rank}"] if bundle.rank else []) + (["inline=1"] if inline else [])
    return "?" + "&".join(parts) if parts else ""


def download_url(job_id: int, f: OutputFile, *, inline: bool = False) -> str:
    """The web URL of ``f``'s bytes (``?inline=1``: shown in the browser when its kind allows)."""
    return reverse("jobs:file-download", args=[job_id, f.path]) + _query(f.bundle, inline=inline)


def preview_url(job_id: int, f: OutputFile) -> str:
    """The web URL of ``f``'s preview page."""
    return reverse("jobs:file", args=[job_id, f.path]) + _query(f.bundle)


def file_rows(job_id: int, bundle: Bundle) -> list[FileRow]:
    """The bundle card's rows for ``bundle``, in manifest order. A bundle without offsets (an
    older agent's ``bundle.tar.gz``) has neither download nor preview links per file, nor has one
    whose archive the storage sweep deleted (its manifest stays)."""
    one_by_one = addressable(bundle) and bundle.expired_at is None
    return [FileRow(f.path, f.size_bytes, f.sha256,
                    download_url(job_id, f) if one_by_one else None,
                    preview_url(job_id, f) if one_by_one and f.kind else None)
            for f in bundle_files(bundle)]


@dataclass
class Preview:
    """What the preview page shows of one file.

    ``kind``: ``image``, ``json``, ``csv``, ``text`` or None (no preview: only the download).
    ``image_url`` (image), ``text`` (json and text), ``header`` and ``rows`` (csv: lists of
    cell strings). ``cut``: only the start is shown (``PREVIEW_BYTES`` or ``CSV_ROWS``);
    ``note``: a sentence on what is shown, or why nothing is.
    """

    kind: str | None
    image_url: str = ""
    text: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    cut: bool = False
    note: str = ""


def file_preview(job_id: int, f: OutputFile) -> Preview:
    """The preview of ``f`` (reads at most ``PREVIEW_BYTES`` of it from the archive).

    Raises:
        NotAddressable: the bundle has no offsets.
    """
    kind = f.kind
    if kind == "image":
        return Preview("image", image_url=download_url(job_id, f, inline=True))
    if kind is None:
        return Preview(None, note="No preview for this kind of file; download it.")
    data = file_head(f)
    cut = f.size_bytes > len(data)
    if b"\0" in data:
        return Preview(None, note="This file holds binary data; download it.")
    text = decode_head(data, cut=cut)
    if kind == "json":
        return _json_preview(text, cut)
    if kind == "csv":
        return _csv_preview(text, cut)
    return Preview("text", text=text, cut=cut,
                   note=f"The first {PREVIEW_BYTES // 1024} KiB of the file." if cut else "")


def _json_preview(text: str, cut: bool) -> Preview:
    """Pretty-printed (2-space indent) when the whole file is read and parses; else as stored."""
    if cut:
        return Preview("json", text=text, cut=True,
                       note=f"Larger than {PREVIEW_BYTES // 1024} KiB: its first {PREVIEW_BYTES // 1024} KiB "
                            "as stored.")
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Preview("json", text=text, note=f"Not valid JSON ({exc}); shown as stored.")
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    if len(pretty) > PREVIEW_BYTES:
        return Preview("json", text=pretty[:PREVIEW_BYTES], cut=True,
                       note=f"The first {PREVIEW_BYTES // 1024} KiB of the pretty-printed file.")
    return Preview("json", text=pretty)


def _csv_preview(text: str, cut: bool) -> Preview:
    """The header row and the next ``CSV_ROWS`` rows (a line cut by the read limit is left out)."""
    if cut:
        text = text.rpartition("\n")[0]
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, [])
        rows = []
        for row in reader:
            if len(rows) == CSV_ROWS:
                cut = True
                break
            rows.append(row)
    except csv.Error as exc:
        return Preview("text", text=text, cut=cut, note=f"Not read as CSV ({exc}); shown as text.")
    width = max([len(header), *(len(r) for r in rows)])
    header = header + [""] * (width - len(header))
    rows = [r + [""] * (width - len(r)) for r in rows]
    return Preview("csv", header=header, rows=rows, cut=cut,
                   note=f"The first {len(rows)} rows." if cut else "")

