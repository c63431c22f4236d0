"""SSRF (issue 11): http(s) inputs reach public addresses only, each redirect checked,
no https -> http, the connection pinned to the address that was checked."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from e31_agent.models import DataItem
from e31_agent.netguard import AddressPolicy, BlockedAddress, guarded_request
from e31_agent.staging import Stager, StagingError

PUBLIC = "93.184.215.14"


def resolver(table: dict[str, list[str]]):
    """A getaddrinfo that answers from ``table`` (host -> addresses)."""

    def resolve(host, port, type=0):
        if host not in table:
            raise socket.gaierror(f"unknown host {host}")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in table[host]]

    return resolve


class Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    hits: list[str] = []

    def do_GET(self):
        self.hits.append(f"{self.server.server_address[0]}{self.path}")
        status, headers, body = self.routes.get(self.path, (404, {}, b"no"))
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def web():
    """A web server on 127.0.0.1 (the "host's service" of the attack) and one on 127.0.0.2."""
    servers = [ThreadingHTTPServer((ip, 0), Handler) for ip in ("127.0.0.1", "127.0.0.2")]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    Handler.hits.clear()
    yield [f"http://{s.server_address[0]}:{s.server_address[1]}" for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def _stage(tmp_path: Path, source: str, policy: AddressPolicy | None = None) -> Path:
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    Stager(client=None, job_dir=job, tmp_dir=tmp_path / "tmp", cache=None, net_policy=policy).stage(
        [DataItem(source=source)])
    return job


@pytest.mark.parametrize("address,kind", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("10.1.2.3", "private"), ("192.168.0.1", "private"), ("172.16.5.5", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "cloud metadata"), ("fe80::1", "link-local"), ("100.64.0.1", "shared"),
    ("100.100.100.200", "shared"), ("224.0.0.1", "multicast"), ("0.0.0.0", "unspecified"),
])
def test_non_public_addresses_are_refused(address, kind):
    policy = AddressPolicy(resolve=resolver({"data.example": [address]}))
    with pytest.raises(BlockedAddress, match=kind):
        policy.check("data.example", 443)
    assert AddressPolicy(resolve=resolver({"ok.example": [PUBLIC]})).check("ok.example", 443) == PUBLIC


def test_a_name_with_one_private_address_among_public_ones_is_refused():
    policy = AddressPolicy(resolve=resolver({"mixed.example": [PUBLIC, "10.0.0.7"]}))
    with pytest.raises(BlockedAddress, match=r"mixed.example \(10.0.0.7\) is a private address"):
        policy.check("mixed.example", 443)


def test_the_operator_may_allow_a_host_or_a_network():
    table = resolver({"nas.lan": ["10.0.0.7"], "other.lan": ["10.9.0.1"]})
    assert AddressPolicy(allow=AddressPolicy.parse(["NAS.lan"]).allow, resolve=table).check("nas.lan", 80) == "10.0.0.7"
    policy = AddressPolicy(allow=("10.0.0.0/16",), resolve=table)
    assert policy.check("nas.lan", 80) == "10.0.0.7"
    with pytest.raises(BlockedAddress):
        policy.check("other.lan", 80)
    with pytest.raises(ValueError):
        AddressPolicy.parse(["10.0.0.0/99"])


def test_staging_from_a_loopback_url_fails_naming_the_input(tmp_path, web):
    Handler.routes = {"/secret": (200, {}, b"internal")}
    with pytest.raises(StagingError, match=r"^data\[0\]: .*127\.0\.0\.1 is a loopback address"):
        _stage(tmp_path, f"{web[0]}/secret")
    assert Handler.hits == []  # refused before any connection


def test_every_redirect_is_checked(tmp_path, web):
    public, internal = web
    Handler.routes = {
        "/to-internal": (302, {"Location": f"{internal}/secret"}, b""),
        "/to-metadata": (301, {"Location": "http://169.254.169.254/latest/meta-data/"}, b""),
        "/to-self": (302, {"Location": "/data.csv"}, b""),
        "/data.csv": (200, {}, b"a,b\n"),
        "/secret": (200, {}, b"internal"),
    }
    only_first = AddressPolicy.parse(["127.0.0.1"])  # stands for "a public host" here
    with pytest.raises(StagingError, match=r"data\[0\]: .*127\.0\.0\.2 is a loopback address"):
        _stage(tmp_path, f"{public}/to-internal", only_first)
    with pytest.raises(StagingError, match="169.254.169.254 is a link-local \\(cloud metadata\\) address"):
        _stage(tmp_path, f"{public}/to-metadata", only_first)
    assert not any(h.startswith("127.0.0.2") for h in Handler.hits)
    job = _stage(tmp_path, f"{public}/to-self", only_first)
    assert (job / "to-self").read_bytes() == b"a,b\n"


def _mock(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_no_downgrade_from_https_to_http():
    policy = AddressPolicy(resolve=resolver({"a.example": [PUBLIC], "b.example": [PUBLIC]}))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://b.example/data"})

    with pytest.raises(BlockedAddress, match="redirect from https to http://b.example/data refused"):
        with guarded_request("https://a.example/x", policy, client=_mock(handler)):
            pass


def test_the_connection_goes_to_the_checked_address_whatever_dns_says_next():
    answers = iter([[PUBLIC], ["127.0.0.1"]])  # a rebinding resolver: public when checked, loopback after
    policy = AddressPolicy(resolve=lambda host, port, type=0: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in next(answers)])
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers["Host"], request.extensions.get("sni_hostname")))
        return httpx.Response(200, content=b"ok")

    with guarded_request("https://rebind.example:8443/f?x=1", policy, client=_mock(handler)) as resp:
        assert resp.read() == b"ok"
    assert seen == [(f"https://{PUBLIC}:8443/f?x=1", "rebind.example:8443", "rebind.example")]


def test_too_many_redirects_stop():
    policy = AddressPolicy(resolve=resolver({"loop.example": [PUBLIC]}))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "https://loop.example/again"})

    with pytest.raises(BlockedAddress, match="more than 10 redirects"):
        with guarded_request("https://loop.example/", policy, client=_mock(handler)):
            pass
