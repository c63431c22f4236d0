"""Webhook tests: a real HTTPS receiver on 127.0.0.1 (a self-signed certificate made here, trusted through
``E31_WEBHOOK_CA_BUNDLE``, its endpoint allowed through ``E31_WEBHOOK_ALLOW_HOSTS``), short timeouts, and
a project with a member of every role."""
from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from rest_framework.test import APIClient

from apps.projects.services import member_add, project_create

from ..factories import UserFactory

CONNECT_S, TOTAL_S = 0.5, 1.0  # the tests' webhook timeouts (seconds)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """``(cert.pem, key.pem)``: a self-signed certificate for 127.0.0.1 and localhost (EC P-256: quick)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "e31 test receiver")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))  # wide: a frozen test clock may make it
            .not_valid_after(dt.datetime(2100, 1, 1, tzinfo=dt.UTC))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Seen:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTPS server in a thread. ``answers`` are the status codes of the next requests (then 200);
    ``hang`` makes it read the request and never answer (until the test ends)."""

    port: int
    seen: list[Seen] = field(default_factory=list)
    sni: list[str | None] = field(default_factory=list)  # the TLS server name of each connection
    answers: deque = field(default_factory=deque)
    hang: bool = False
    stop: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


def _start(tls_files) -> tuple[Receiver, ThreadingHTTPServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, tls_files))
    receiver: Receiver
    context.sni_callback = lambda sock, name, ctx: receiver.sni.append(name)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if receiver.hang:
                receiver.stop.wait(30)
                return
            code = receiver.answers.popleft() if receiver.answers else 200
            self.send_response(code)
            if 300 <= code < 400:
                self.send_header("Location", "https://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver = Receiver(server.server_address[1])
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return receiver, server


@pytest.fixture
def hook_settings(settings, tls_files):
    """The receivers' certificate trusted, short timeouts, a quick secrets key, nothing allowed yet."""
    settings.E31_WEBHOOK_CA_BUNDLE = str(tls_files[0])
    settings.E31_WEBHOOK_ALLOW_HOSTS = []
    settings.E31_WEBHOOK_CONNECT_TIMEOUT_S, settings.E31_WEBHOOK_TIMEOUT_S = CONNECT_S, TOTAL_S
    settings.E31_SECRETS_KEY = Fernet.generate_key().decode()
    settings.E31_WEBHOOK_SEND_IN_THREAD = False  # eager Celery tries at once, on the test's thread
    return settings


@pytest.fixture
def receivers(hook_settings, tls_files):
    """``make()``: a new receiver, its endpoint allowed. All are stopped at the end of the test."""
    started: list[tuple[Receiver, ThreadingHTTPServer]] = []

    def make() -> Receiver:
        receiver, server = _start(tls_files)
        started.append((receiver, server))
        hook_settings.E31_WEBHOOK_ALLOW_HOSTS = [*hook_settings.E31_WEBHOOK_ALLOW_HOSTS, receiver.endpoint,
                                                 f"localhost:{receiver.port}"]
        return receiver

    yield make
    for receiver, server in started:
        receiver.stop.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver(receivers) -> Receiver:
    return receivers()


@dataclass
class Team:
    """Project ``ml-team``: owner, admin, member and viewer; ``stranger`` is in no project of theirs."""

    project: object
    owner: object
    admin: object
    member: object
    viewer: object
    stranger: object

    def api(self, who: str) -> APIClient:
        client = APIClient()
        if who != "anonymous":
            client.force_authenticate(getattr(self, who))
        return client


@pytest.fixture
def team(db, hook_settings) -> Team:
    owner = UserFactory(username="lead")
    users = {role: UserFactory(username=f"{role}-user") for role in ("admin", "member", "viewer")}
    project = project_create(owner=owner, name="ml-team")
    for role, user in users.items():
        member_add(actor=owner, project=project, who=user.username, role=role)
    return Team(project, owner, users["admin"], users["member"], users["viewer"], UserFactory(username="outsider"))
