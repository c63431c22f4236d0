"""Web policy of issue 11: sign-in throttling, CSV formulas, WebSocket origin with its port,
Content-Security-Policy, HTTPS cookies and HSTS."""
import csv
import io

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.metering.csvsafe import csv_cell
from e31site.asgi import application
from e31site.wsorigin import origin_allowed

from ..factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def _sign_in(password: str, username: str = "victim", ip: str = "10.0.0.1") -> int:
    return Client(REMOTE_ADDR=ip).post("/accounts/login/", {"username": username, "password": password}).status_code


def test_sign_in_is_refused_after_too_many_wrong_passwords_even_with_the_right_one(settings):
    settings.AXES_FAILURE_LIMIT = 5
    UserFactory(username="victim")
    assert _sign_in(PASSWORD) == 302  # the right password signs in
    for _ in range(4):
        assert _sign_in("wrong") == 200  # the form again, with its error
    assert _sign_in("wrong") == 429  # the fifth: locked out
    assert _sign_in(PASSWORD) == 429
    assert _sign_in(PASSWORD, ip="10.0.0.2") == 429  # per account: another address is refused too


def test_sign_in_is_throttled_per_address_across_accounts(settings):
    settings.AXES_FAILURE_LIMIT = 5
    UserFactory(username="someone")
    for i in range(5):
        _sign_in("wrong", username=f"guess{i}", ip="10.0.0.9")
    assert _sign_in(PASSWORD, username="someone", ip="10.0.0.9") == 429
    assert _sign_in(PASSWORD, username="someone", ip="10.0.0.10") == 302


@pytest.mark.parametrize("forwarded", [b"203.0.113.7", b"203.0.113.7, 127.0.0.1"])
def test_standalone_takes_the_client_address_from_the_socket_not_a_forwarded_header(forwarded):
    """A caller of ``make run`` (from 127.0.0.1, which uvicorn trusts by default) who sends a fresh
    X-Forwarded-For each time must still be one address to the per-address lockout above."""
    import asyncio

    from e31site.standalone import server_config

    seen = {}

    async def app(scope, receive, send):
        seen.update(client=scope["client"], scheme=scope["scheme"])

    config = server_config("127.0.0.1", 0, app=app)
    config.load()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/accounts/login/", "raw_path": b"/accounts/login/", "query_string": b"", "root_path": "",
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8031),
             "headers": [(b"x-forwarded-for", forwarded), (b"x-forwarded-proto", b"https")]}
    asyncio.run(config.loaded_app(scope, None, None))
    assert seen == {"client": ("127.0.0.1", 50000), "scheme": "http"}


@pytest.mark.parametrize("value,expected", [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"), ("+1+2", "'+1+2"), ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("plain", "plain"), ("-1.50", "-1.50"), (3, 3),
])
def test_csv_cells_that_start_a_formula_are_escaped(value, expected):
    assert csv_cell(value) == expected


def test_the_usage_csv_escapes_a_formula_job_name(owner, api, pool):
    from ..factories import spec
    resp = api.post("/api/v1/jobs/", spec(name="=cmd|' /C calc'!A0"), format="json")
    assert resp.status_code == 201, resp.json()
    from apps.jobs.models import Job
    from apps.jobs.services.cancel import job_cancel
    job_cancel(job=Job.objects.get(pk=resp.json()["id"]))
    for body in (api.get("/api/v1/usage/?format=csv").content.decode(),):
        cells = [c for row in csv.reader(io.StringIO(body)) for c in row]
        assert not any(c.startswith("=") for c in cells)
    client = Client()
    client.force_login(owner)
    page = client.get("/usage/csv/").content.decode()
    assert not any(c.startswith("=") for row in csv.reader(io.StringIO(page)) for c in row)


@pytest.mark.parametrize("origin,host,ok", [
    ("http://127.0.0.1:8031", "127.0.0.1:8031", True),
    ("http://127.0.0.1:9999", "127.0.0.1:8031", False),  # same host, another port: another origin
    ("http://127.0.0.1", "127.0.0.1:80", True),
    ("https://127.0.0.1", "127.0.0.1:80", False),
    ("http://evil.example", "127.0.0.1:8031", False),
    ("http://evil.example:8031", "evil.example:8031", False),  # not in ALLOWED_HOSTS
    (None, "127.0.0.1:8031", False),
    ("null", "127.0.0.1:8031", False),
])
def test_the_websocket_origin_is_checked_with_its_port(origin, host, ok):
    assert origin_allowed(origin, host) is ok


def test_a_websocket_from_another_port_is_closed_before_accept(owner):
    import asyncio

    async def scenario():
        comm = WebsocketCommunicator(application, "/ws/pool/", headers=[
            (b"origin", b"http://127.0.0.1:9999"), (b"host", b"127.0.0.1:8031")])
        connected, _ = await comm.connect()
        assert not connected
        await comm.disconnect()

    asyncio.run(scenario())


def test_pages_carry_a_csp_without_inline_script(owner):
    client = Client()
    client.force_login(owner)
    for url in ("/", "/accounts/login/", "/api/docs/", "/usage/"):
        resp = client.get(url)
        policy = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        body = resp.content.decode()
        assert "<script>" not in body  # every script has a src (none inline)


def test_https_mode_sets_secure_cookies_and_hsts(monkeypatch):
    import subprocess
    import sys
    code = ("import django, os; django.setup(); from django.conf import settings as s; "
            "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS > 0, s.SECURE_SSL_REDIRECT)")
    env = {**__import__("os").environ, "E31_HTTPS": "1", "DJANGO_SETTINGS_MODULE": "e31site.settings"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True", "True"]
    env["E31_HTTPS"] = "0"
    out = subprocess.run([sys.executable, "-c", code.replace("s.SECURE_HSTS_SECONDS > 0", "s.SECURE_HSTS_SECONDS")],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "0", "False"]
