"""Request bodies (issue 11, item 4): refused from Content-Length, or while read, before Django
reads them; an anonymous caller's large body is never read."""
import asyncio

import pytest

from apps.tokens.services import token_issue
from e31site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def call(path: str, headers: dict[str, str], chunks: list[bytes], method: str = "POST"):
    """Run one HTTP request through the real ASGI application; returns (status, body, chunks read)."""
    read = []
    sent = []

    async def receive():
        if len(read) < len(chunks):
            read.append(chunks[len(read)])
            return {"type": "http.request", "body": read[-1], "more_body": len(read) < len(chunks)}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1", **headers}.items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8031)}
    asyncio.run(asyncio.wait_for(application(scope, receive, send), 30))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, len(read)


MULTIPART = "multipart/form-data; boundary=xyz"
BIG = str(256 * 1024 * 1024)


@pytest.mark.parametrize("path,status", [("/api/v1/uploads/", 401), ("/accounts/login/", 403),
                                         ("/jobs/new/", 403), ("/api/v1/jobs/", 401)])
def test_an_anonymous_256_mib_body_is_refused_unread(path, status):
    code, _, read = call(path, {"content-type": MULTIPART, "content-length": BIG}, [b"x" * 65536] * 4)
    assert (code, read) == (status, 0)


def test_an_anonymous_chunked_body_is_refused_unread():
    code, _, read = call("/api/v1/uploads/", {"content-type": MULTIPART, "transfer-encoding": "chunked"},
                         [b"x" * 65536] * 4)
    assert (code, read) == (401, 0)


def test_a_bad_token_counts_as_anonymous():
    code, _, read = call("/api/v1/uploads/", {"content-type": MULTIPART, "content-length": BIG,
                                              "authorization": "Token " + "0" * 40}, [b"x"])
    assert (code, read) == (401, 0)


def test_a_body_past_the_cap_is_413_from_its_length_even_signed_in(owner, settings):
    settings.E31_UPLOAD_MAX_BYTES = 1000
    auth = {"authorization": f"Token {token_issue(user=owner)}", "content-type": MULTIPART}
    code, body, read = call("/api/v1/uploads/", {**auth, "content-length": str(2 * 1024 * 1024)}, [b"x"])
    assert (code, read) == (413, 0) and b"the most /api/v1/uploads/ takes" in body


def test_a_body_that_grows_past_the_cap_while_read_is_cut_off(owner, settings):
    settings.E31_UPLOAD_MAX_BYTES = 1000
    auth = {"authorization": f"Token {token_issue(user=owner)}", "content-type": MULTIPART}
    code, _, read = call("/api/v1/uploads/", {**auth, "transfer-encoding": "chunked"}, [b"x" * (512 * 1024)] * 8)
    assert code == 413 and read <= 4


def test_a_small_anonymous_sign_in_still_works(owner):
    from tests.factories import PASSWORD
    body = f"username=owner&password={PASSWORD}".encode()
    from django.test import override_settings
    with override_settings(CSRF_COOKIE_SECURE=False):
        code, _, _ = call("/accounts/login/", {"content-type": "application/x-www-form-urlencoded",
                                               "content-length": str(len(body))}, [body])
    assert code == 403  # Django's CSRF refusal: the body was read and the form handled as usual


def test_a_chunked_multipart_upload_without_content_length_is_stored(owner):
    """Issue 26 item 7: the parsers took a missing Content-Length for an empty body ("file required")."""
    import json
    data = b"0123456789" * 20000  # 200,000 bytes, in three chunks
    body = (b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="in.bin"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--xyz--\r\n")
    chunks = [body[:70000], body[70000:140000], body[140000:]]
    auth = {"authorization": f"Token {token_issue(user=owner)}", "content-type": MULTIPART}
    code, answer, read = call("/api/v1/uploads/", {**auth, "transfer-encoding": "chunked"}, chunks)
    assert (code, read) == (201, 3), answer
    assert json.loads(answer)["size_bytes"] == len(data) and json.loads(answer)["name"] == "in.bin"
