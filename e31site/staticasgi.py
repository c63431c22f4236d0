"""Static files served by WhiteNoise in front of the ASGI application (issue 15).

WhiteNoise's Django middleware is synchronous: in ``MIDDLEWARE`` it would make Django run
every request's middleware chain in a thread, and the agents' long polls would each hold one
(see ``e31site/asgi.py``). So its file index is used here, at the ASGI level, in front of
Django: a request under ``STATIC_URL`` for a file WhiteNoise knows is answered with its
headers (``Cache-Control``, ``ETag``, ``Last-Modified``, a ``.gz``/``.br`` variant when
``collectstatic`` wrote one and the client accepts it, 304, Range) and its bytes read in a
worker thread; any other request goes to Django untouched. Configuration is WhiteNoise's own
``WHITENOISE_*`` settings (https://whitenoise.readthedocs.io/en/stable/django.html).
"""
from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware

BLOCK = 256 * 1024  # bytes read per send


class WhiteNoiseASGI:
    """ASGI app: static files through WhiteNoise's index, everything else to ``app``."""

    def __init__(self, app: Any):
        self.app = app
        self.whitenoise = WhiteNoiseMiddleware(get_response=None)  # reads STATIC_ROOT (and finders) once

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        static_file = None
        if scope["type"] == "http" and scope["path"].startswith(self.whitenoise.static_prefix):
            path = scope["path"]
            static_file = (self.whitenoise.find_file(path) if self.whitenoise.autorefresh
                           else self.whitenoise.files.get(path))
        if static_file is None:
            await self.app(scope, receive, send)
            return
        environ = {"HTTP_" + name.decode("latin-1").upper().replace("-", "_"): value.decode("latin-1")
                   for name, value in scope.get("headers", [])}
        response = await sync_to_async(static_file.get_response, thread_sensitive=False)(scope["method"], environ)
        await send({"type": "http.response.start", "status": int(response.status),
                    "headers": [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in response.headers]})
        if response.file is None:
            await send({"type": "http.response.body", "body": b""})
            return
        read = sync_to_async(response.file.read, thread_sensitive=False)
        try:
            while data := await read(BLOCK):
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            response.file.close()
