"""Serve a stored file with HTTP Range support (RFC 9110 §14), single ranges.

Under ASGI (uvicorn) the body is an *asynchronous* iterator reading 4 MiB
blocks in a worker thread: Django consumes a synchronous iterator there by
reading it whole into memory first (``StreamingHttpResponse.__aiter__``),
which for a 1 GB bundle meant 1 GB held in the web process and the first
byte only after the last was read (``benchmarks/bundle_throughput.py``).
"""
from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.utils.http import content_disposition_header

from .files import FILE_CSP, OutputFile, content_type, file_check
from .retention import bundle_check_kept
from .services import bundle_latest
from .storage import is_direct, object_store, open_span

RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
BLOCK = 4 * 1024 * 1024
UNSATISFIABLE = (-1, -1)


def _stream(fh, start: int, length: int) -> Iterator[bytes]:
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


async def _astream(fh, start: int, length: int) -> AsyncIterator[bytes]:
    """:func:`_stream` for ASGI: each block is read in a worker thread, never the whole file at once.

    4 MiB blocks: 1 MiB ones cost a thread hop per MiB and served a 1 GB bundle at a third of the speed.
    """
    blocks = _stream(fh, start, length)
    step = sync_to_async(next, thread_sensitive=False)
    try:
        while (data := await step(blocks, None)) is not None:
            yield data
    finally:
        await sync_to_async(blocks.close, thread_sensitive=False)()


def _body(request: HttpRequest, fh, start: int, length: int) -> Iterator[bytes] | AsyncIterator[bytes]:
    from django.core.handlers.asgi import ASGIRequest

    raw = getattr(request, "_request", request)  # DRF wraps the HttpRequest
    return _astream(fh, start, length) if isinstance(raw, ASGIRequest) else _stream(fh, start, length)


_HUGE = 10**18  # past any file; a longer number is read as this (int() refuses > 4,300 digits: a 500)


def _position(digits: str) -> int:
    return int(digits) if len(digits) <= 18 else _HUGE


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The inclusive ``(first, last)`` byte range a ``Range`` header asks of ``size`` bytes.

    Returns None when the header is absent, not one range, or invalid (then
    it is ignored and the whole file is sent, RFC 9110 §14.2), and
    ``UNSATISFIABLE`` when it is valid but starts past the end (416).
    """
    match = RANGE.match(header.strip()) if header else None
    if not match or not (match.group(1) or match.group(2)):
        return None
    first, last = match.groups()
    if first:
        start = _position(first)
        if last and _position(last) < start:
            return None
        if start >= size:
            return UNSATISFIABLE
        return start, min(_position(last), size - 1) if last else size - 1
    suffix = _position(last)
    if suffix == 0 or size == 0:
        return UNSATISFIABLE
    return max(0, size - suffix), size - 1


def archive_label(stored: str, filename: str, content_type: str) -> tuple[str, str]:
    """The download name and type for a stored file: a bundle is a plain ``bundle.tar`` since
    issue 15 (``bundle.tar.gz`` only from older agents); a name ending ``.tar.gz`` given for a
    stored ``.tar`` becomes ``.tar`` with ``application/x-tar``, so ``tar xzf`` is never told a
    plain tar is gzip. Other names are left as they are."""
    if stored.endswith(".tar") and filename.endswith(".tar.gz"):
        return filename[: -len(".gz")], "application/x-tar"
    return filename, content_type


def serve_file(request: HttpRequest, fieldfile, *, filename: str, size: int, etag: str = "",
               content_type: str = "application/gzip", base: int = 0, inline: bool = False,
               as_archive: bool = True) -> HttpResponse:
    """Answer 200 with the whole file, 206 with one range, or 416 for a range past the end.

    ``etag`` (for instance the file's sha256) is sent as a strong ETag; a
    ``Range`` with an ``If-Range`` that does not match it gets the whole file.
    A stored plain ``.tar`` asked for as ``.tar.gz`` (the bundle views name every
    bundle so) is sent as ``.tar``, ``application/x-tar``: see :func:`archive_label`.
    ``base`` and ``size``: the bytes ``[base, base + size)`` of the stored file are the
    file served (one member of a bundle), ranges and ``Content-Range`` relative to them.
    ``inline``: ``Content-Disposition: inline`` instead of ``attachment``. ``as_archive=False``
    (one member of a bundle) leaves ``filename`` and ``content_type`` as given.
    """
    if as_archive:
        filename, content_type = archive_label(fieldfile.name or "", filename, content_type)
    wanted = byte_range(request.headers.get("Range", ""), size)
    if_range = request.headers.get("If-Range")
    if wanted is not None and if_range is not None and (not etag or if_range.strip() != f'"{etag}"'):
        wanted = None
    if wanted == UNSATISFIABLE:
        resp = HttpResponse(status=416)
        resp["Content-Range"] = f"bytes */{size}"
        return resp
    if wanted is not None:
        start, end = wanted
        resp = StreamingHttpResponse(_body(request, open_span(fieldfile, base + start, end - start + 1), base + start,
                                           end - start + 1), status=206, content_type=content_type)
        resp["Content-Range"] = f"bytes {start}-{end}/{size}"
        resp["Content-Length"] = str(end - start + 1)
    else:
        resp = StreamingHttpResponse(_body(request, open_span(fieldfile, base, size), base, size),
                                     content_type=content_type)
        resp["Content-Length"] = str(size)
    if etag:
        resp["ETag"] = f'"{etag}"'
    resp["Accept-Ranges"] = "bytes"
    resp["Content-Disposition"] = content_disposition_header(not inline, _printable(filename))
    return resp


def _printable(filename: str) -> str:
    """``filename`` with each control character (CR, LF...) as ``_``: a header cannot carry them."""
    return "".join(c if c.isprintable() else "_" for c in filename)


def bundle_response(request: HttpRequest, job, *, rank: int = 0) -> HttpResponse:
    """The latest verified bundle of ``job`` (any object with ``pk``, as
    :func:`apps.artifacts.services.bundle_latest` takes) on node rank ``rank``, as
    ``job-<id>-bundle[-rank<r>].tar.gz`` with HTTP Range support: the one download of the job
    page and of ``GET /api/v1/jobs/{id}/bundle/``.

    Raises:
        Http404: the job has no bundle (yet) on that rank.
        OutputsExpired: the storage sweep deleted it (the views answer 410 Gone).
    """
    bundle = bundle_latest(job, rank=rank)
    if bundle is not None:
        bundle_check_kept(bundle)
    if bundle is None or not bundle.file:
        raise Http404
    suffix = f"-rank{bundle.rank}" if bundle.rank else ""
    if is_direct():
        return bundle_redirect(bundle, filename=f"job-{job.pk}-bundle{suffix}.tar.gz")
    return serve_file(request, bundle.file, filename=f"job-{job.pk}-bundle{suffix}.tar.gz",
                      size=bundle.size_bytes, etag=bundle.sha256)



def bundle_redirect(bundle, *, filename: str) -> HttpResponse:
    """302 to a GET of the bundle's archive in the object store, signed for this request alone
    (``E31_STORAGE_URL_EXPIRY_S``, 300 s): the store serves the bytes and honours ``Range``
    itself; name and type as :func:`archive_label` gives them. The caller checked ownership."""
    name, ctype = archive_label(bundle.file.name, filename, "application/gzip")
    resp = HttpResponseRedirect(object_store().get_url(bundle.file.name, filename=name, content_type=ctype))
    resp["Cache-Control"] = "private, no-store"
    return resp


def output_file_response(request: HttpRequest, f: OutputFile, *, inline: bool = False) -> HttpResponse:
    """One file of a bundle, read from the stored archive at its offset (never unpacked), with
    HTTP Range support relative to the file: ETag its sha256, type guessed from its name,
    ``attachment`` unless ``inline`` is asked and the file is a kind that cannot run
    (:func:`.files.content_type`; SVG never), and a sandboxing CSP on every answer.

    Raises:
        NotAddressable: the bundle has no offsets (an older agent's ``bundle.tar.gz``).
    """
    file_check(f)
    ctype, shown = content_type(f.path, inline=inline)
    resp = serve_file(request, f.bundle.file, filename=f.name, size=f.size_bytes, etag=f.sha256,
                      content_type=ctype, base=f.offset or 0, inline=shown, as_archive=False)
    resp["Content-Security-Policy"] = FILE_CSP
    return resp
