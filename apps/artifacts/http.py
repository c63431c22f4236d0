"""Serve a stored file with HTTP Range support (RFC 9110 §14), single ranges."""
from __future__ import annotations

import re

from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse

RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
BLOCK = 64 * 1024


def _stream(fh, start: int, length: int):
    fh.seek(start)
    left = length
    try:
        while left > 0:
            data = fh.read(min(BLOCK, left))
            if not data:
                break
            left -= len(data)
            yield data
    finally:
        fh.close()


def serve_file(request: HttpRequest, fieldfile, *, filename: str, size: int,
               content_type: str = "application/gzip") -> HttpResponse:
    """Answer 200 with the whole file, 206 with one range, or 416 for a range past the end.

    Multi-range requests get the whole file (allowed by the RFC).
    """
    header = request.headers.get("Range", "")
    match = RANGE.match(header.strip()) if header else None
    if match and (match.group(1) or match.group(2)):
        first, last = match.groups()
        if first:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
        else:
            start = max(0, size - int(last))
            end = size - 1
        if start >= size or start > end:
            resp = HttpResponse(status=416)
            resp["Content-Range"] = f"bytes */{size}"
            return resp
        fh = fieldfile.open("rb")
        resp = StreamingHttpResponse(_stream(fh, start, end - start + 1), status=206, content_type=content_type)
        resp["Content-Range"] = f"bytes {start}-{end}/{size}"
        resp["Content-Length"] = str(end - start + 1)
    else:
        resp = FileResponse(fieldfile.open("rb"), content_type=content_type)
        resp["Content-Length"] = str(size)
    resp["Accept-Ranges"] = "bytes"
    resp["Content-Disposition"] = f'attachment; filename="{filename}"'
    return resp
