"""Static files through WhiteNoise at the ASGI level (issue 15, e31site/staticasgi.py)."""
from __future__ import annotations

import asyncio
import gzip

from django.core.management import call_command

from e31site.staticasgi import WhiteNoiseASGI


async def _fallback(scope, receive, send):
    await send({"type": "http.response.start", "status": 418, "headers": []})
    await send({"type": "http.response.body", "body": b"django"})


def get(app, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    """One request through ``app``: (status, headers lower-cased, body)."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return (start["status"], {k.decode(): v.decode() for k, v in start["headers"]},
            b"".join(m.get("body", b"") for m in sent[1:]))


def test_static_file_served_with_caching_headers_and_304(settings, tmp_path):
    (tmp_path / "static").mkdir()
    settings.STATIC_ROOT = str(tmp_path / "static")  # empty: files where they lie (make run, no collectstatic)
    settings.WHITENOISE_USE_FINDERS = True
    app = WhiteNoiseASGI(_fallback)
    status, headers, body = get(app, "/static/css/e31.css")
    assert status == 200 and headers["content-type"].startswith("text/css") and body
    assert "max-age" in headers["cache-control"] and headers["etag"]
    status, _, body = get(app, "/static/css/e31.css", {"If-None-Match": headers["etag"]})
    assert status == 304 and body == b""
    status, headers, body = get(app, "/static/css/e31.css", method="HEAD")
    assert status == 200 and body == b""


def test_other_paths_and_unknown_static_files_go_to_django(settings):
    app = WhiteNoiseASGI(_fallback)
    assert get(app, "/jobs/")[0] == 418
    assert get(app, "/static/no-such-file.css")[0] == 418
    assert get(app, "/static/../e31site/settings.py")[0] == 418


def test_collected_files_are_served_compressed(settings, tmp_path):
    settings.STATIC_ROOT = str(tmp_path / "collected")
    settings.WHITENOISE_USE_FINDERS = False  # as in production after collectstatic
    call_command("collectstatic", "--noinput", verbosity=0)
    app = WhiteNoiseASGI(_fallback)
    status, headers, body = get(app, "/static/vendor/htmx.min.js", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert b"htmx" in gzip.decompress(body)
