"""Bundle chunks held in memory, not spooled to a temporary file (issue 15, local mode).

Django's ASGI handler writes every request body past ``FILE_UPLOAD_MAX_MEMORY_SIZE``
(1 MiB) to a temporary file, and the view then reads it back: for a 32 MiB bundle
chunk that is one more write and one more read of every byte of every upload, on
top of the hash and the write into the bundle. On the one path that carries chunks
(``PUT /api/v1/agent/jobs/<id>/bundle/``) this handler joins the body in memory
instead; ``request.body`` is then that very ``bytes`` object (``BytesIO.read`` of
a whole buffer returns it without a copy). The body is already bounded by
:mod:`e31site.bodylimit` (``DATA_UPLOAD_MAX_MEMORY_SIZE`` + 1 MiB, and only for a
caller with a valid token past 64 KiB), so one chunk upload holds at most that
much. Every other request is read as Django reads it.

A body sent chunked (``Transfer-Encoding: chunked``, no ``Content-Length``) is read whole
here like any other, but Django's and DRF's parsers take a missing ``Content-Length`` for an
empty body: a chunked multipart upload was refused as "file required" (issue 26 item 7). Once
the body is read, :meth:`BodyInMemoryASGIHandler.create_request` gives such a request the
``CONTENT_LENGTH`` of the bytes actually received.
"""
from __future__ import annotations

import io
import re

import django
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler

IN_MEMORY = re.compile(r"^/api/v1/agent/jobs/[0-9]{1,18}/bundle/$")


class _InMemoryReceive:
    """``receive`` of a request whose body is read into memory."""

    def __init__(self, receive):
        self.receive = receive

    async def __call__(self):
        return await self.receive()


class BodyInMemoryASGIHandler(ASGIHandler):
    """Django's ASGI handler, but bundle chunks are read into memory (see the module)."""

    async def handle(self, scope, receive, send):
        if scope.get("method") == "PUT" and IN_MEMORY.match(scope.get("path", "")):
            receive = _InMemoryReceive(receive)
        return await super().handle(scope, receive, send)

    async def read_body(self, receive):
        if not isinstance(receive, _InMemoryReceive):
            return await super().read_body(receive)
        parts: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            if message.get("body"):
                parts.append(message["body"])
            if not message.get("more_body", False):
                break
        return io.BytesIO(b"".join(parts))

    def create_request(self, scope, body_file):
        """Django's request, with ``CONTENT_LENGTH`` (bytes) set from the body read when the
        client sent none (a chunked body; see the module)."""
        request, error_response = super().create_request(scope, body_file)
        if request is not None and "CONTENT_LENGTH" not in request.META:
            size = body_length(body_file)
            if size:
                request.META["CONTENT_LENGTH"] = str(size)
        return request, error_response


def body_length(body_file) -> int:
    """The size in bytes of a body already read into ``body_file``, left at its start."""
    body_file.seek(0, io.SEEK_END)
    size = body_file.tell()
    body_file.seek(0)
    return size


def get_asgi_application() -> BodyInMemoryASGIHandler:
    """:func:`django.core.asgi.get_asgi_application` with :class:`BodyInMemoryASGIHandler`."""
    django.setup(set_prefix=False)
    return BodyInMemoryASGIHandler()
