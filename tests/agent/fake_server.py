"""A tiny in-process server speaking the agent protocol (docs/agent-protocol.md).

Enough of the site for the agent's tests: real HTTP on 127.0.0.1, a random
port, and hooks to make calls fail (``fail``) the way a flaky network or a
restarting server would.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "node-secret-token"


@dataclass
class State:
    heartbeat_interval_s: float = 0.3
    poll_wait_s: float = 1.0
    inventory: dict[str, Any] | None = None
    assignments: list[dict[str, Any]] = field(default_factory=list)
    cancel: list[dict[str, int]] = field(default_factory=list)
    stale: set[tuple[int, int]] = field(default_factory=set)
    reports: dict[int, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    seqs: set[tuple[int, int, int]] = field(default_factory=set)
    logs: dict[tuple[int, int], bytearray] = field(default_factory=lambda: defaultdict(bytearray))
    log_cap: int = 10 * 1024 * 1024
    # every log post: (job_id, attempt, offset, bytes, stream or None, at or None)
    log_posts: list[tuple[int, int, int, bytes, str | None, str | None]] = field(default_factory=list)
    bundles: dict[tuple[int, int], bytearray] = field(
        default_factory=lambda: defaultdict(bytearray)
    )
    completed: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    uploads: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    checkpoints: dict[tuple[int, str], bytes] = field(default_factory=dict)  # (job_id, path) -> the file
    static: dict[str, bytes] = field(default_factory=dict)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    running: list[dict[str, int]] = field(default_factory=list)  # register's "running"
    node_state: str = "up"  # the heartbeat answer's "state"
    registrations: int = 0
    chunk_max: int | None = None  # largest chunk taken (a server from before issue 15: 8 MiB)
    bundle_puts_left: int | None = None  # chunks taken before every further PUT drops the connection
    chunk_headers: list[str | None] = field(default_factory=list)
    # (method, path prefix) -> statuses to answer before serving; 0 = drop the connection
    fail: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    batch_call: bool = True  # False: a protocol v1 server, without POST reports/ (answers 404)
    batches: list[list[dict[str, Any]]] = field(default_factory=list)  # each POST reports/ body
    item_fail: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (job, seq) -> statuses
    work_have: list[set[tuple[int, int]]] = field(default_factory=list)  # each poll's ?have=
    sticky_assignments: bool = False  # True: reports do not take assignments off the work answer
    protocol: int = 3  # 2: answers carry no ``code`` (a protocol v2 server: the agent reads the words)
    samples: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    sample_posts: list[dict[str, Any]] = field(default_factory=list)  # each POST jobs/<id>/samples/ body
    samples_call: bool = True  # False: a server from before usage charts (samples/ answers 404)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def types(self, job_id: int) -> list[str]:
        with self.lock:
            return [r["type"] for r in self.reports[job_id]]

    def wait_for(self, predicate: Any, timeout_s: float = 10.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self.lock:
                if predicate():
                    return True
            time.sleep(0.02)
        return False


class Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ------------------------------------------------------------

    def _answer(
        self,
        status: int,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> None:
        data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        self.send_response(status)
        self.send_header(
            "Content-Type", "application/json" if raw is None else "application/octet-stream"
        )
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self._body()
        st = self.state
        with st.lock:
            st.calls.append((method, url.path))
            for (m, prefix), statuses in st.fail.items():
                if m == method and url.path.startswith(prefix) and statuses:
                    status = statuses.pop(0)
                    if status == 0:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self._answer(status, {"detail": "injected failure"})
                    return
        if url.path.startswith("/static/"):  # a plain web server, for https:// style inputs
            data = st.static.get(url.path.removeprefix("/static/"))
            if data is None:
                return self._answer(404, {"detail": "not found"})
            etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
            return self._answer(200, raw=data, headers={"ETag": etag})
        if self.headers.get("Authorization") != f"Node {TOKEN}":
            self._answer(401, {"detail": "bad token"})
            return
        parts = [p for p in url.path.split("/") if p][3:]  # after api/v1/agent
        try:
            self._route(method, parts, query, body)
        except BrokenPipeError:
            pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    # -- the protocol ----------------------------------------------------------

    def _error(self, detail: str, code: str) -> dict[str, Any]:
        """An error body as the server's protocol version writes it."""
        return {"detail": detail, "code": code} if self.state.protocol >= 3 else {"detail": detail}

    def _apply_report(self, job_id: int, report: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One report, under ``state.lock``: (status, answer body)."""
        st = self.state
        key = (job_id, report["attempt"])
        if key in st.stale:
            return 409, self._error("stale attempt", "stale_attempt")
        if (job_id, report["attempt"], report["seq"]) in st.seqs:
            return 200, {"duplicate": True}
        st.seqs.add((job_id, report["attempt"], report["seq"]))
        st.reports[job_id].append(report)
        # any report means the assignment was taken ("running" folds "accepted" in)
        if not st.sticky_assignments:
            st.assignments = [a for a in st.assignments if (a["job_id"], a["attempt"]) != key]
        if report["type"] == "exited" or report.get("exited"):
            st.cancel = [c for c in st.cancel if (c["job_id"], c["attempt"]) != key]
        st.lock.notify_all()
        return 200, {"duplicate": False}

    def _route(self, method: str, parts: list[str], q: dict[str, str], body: bytes) -> None:
        st = self.state
        if parts == ["register"]:
            with st.lock:
                st.inventory = json.loads(body)
                st.registrations += 1
                st.node_state = "up"
            return self._answer(
                200,
                {
                    "node": "node-t",
                    "heartbeat_interval_s": st.heartbeat_interval_s,
                    "poll_wait_s": st.poll_wait_s,
                    "running": list(st.running),
                },
            )
        if parts == ["heartbeat"]:
            with st.lock:
                st.heartbeats.append(json.loads(body))
                return self._answer(200, {"cancel": list(st.cancel), "state": st.node_state})
        if parts == ["work"]:
            end = time.monotonic() + min(float(q.get("wait", 0)), st.poll_wait_s)
            have = {tuple(int(x) for x in ref.split(".")) for ref in q.get("have", "").split(",") if ref}
            with st.lock:
                st.work_have.append(have)

                def new() -> list[dict[str, Any]]:
                    return [a for a in st.assignments if (a["job_id"], a["attempt"]) not in have]

                while not (new() or st.cancel) and time.monotonic() < end:
                    st.lock.wait(0.05)
                return self._answer(
                    200, {"assignments": list(st.assignments), "cancel": list(st.cancel)}
                )
        if parts == ["reports"] and method == "POST":
            if not st.batch_call:
                return self._answer(404, {"detail": "no such call"})
            items = json.loads(body)["reports"]
            with st.lock:
                st.batches.append(items)
                results = []
                failed: set[tuple[int, int]] = set()  # as the site: a failure holds back the attempt's later ones
                for item in items:
                    report = {k: v for k, v in item.items() if k != "job_id"}
                    forced = st.item_fail.get((item["job_id"], report["seq"]))
                    if (item["job_id"], report["attempt"]) in failed:
                        status, answer = 503, {"detail": "not applied"}
                    elif forced:
                        status, answer = forced.pop(0), {"detail": "injected item failure"}
                        if not forced:
                            del st.item_fail[(item["job_id"], report["seq"])]
                    else:
                        status, answer = self._apply_report(item["job_id"], report)
                    if status >= 500:
                        failed.add((item["job_id"], report["attempt"]))
                    results.append({"job_id": item["job_id"], "seq": report["seq"], "status": status, **answer})
                return self._answer(200, {"results": results})
        if parts[:1] == ["uploads"]:
            with st.lock:
                item = st.uploads.get(parts[1])
            if item is None:
                return self._answer(404, {"detail": "not found"})
            name, data = item
            return self._answer(
                200, raw=data, headers={"Content-Disposition": f'attachment; filename="{name}"'}
            )
        if parts[:1] != ["jobs"]:
            return self._answer(404, {"detail": "no such call"})
        job_id = int(parts[1])
        rest = parts[2:]
        if rest == ["checkpoint"]:
            with st.lock:
                data = st.checkpoints.get((job_id, q.get("path", "")))
            return self._answer(404, {"detail": "not found"}) if data is None else self._answer(200, raw=data)
        if rest == ["report"]:
            with st.lock:
                status, answer = self._apply_report(job_id, json.loads(body))
            return self._answer(status, answer)
        attempt = int(q["attempt"])
        key = (job_id, attempt)
        with st.lock:
            if key in st.stale:
                return self._answer(409, self._error("stale attempt", "stale_attempt"))
        if rest == ["log"]:
            offset = int(q["offset"])
            with st.lock:
                st.log_posts.append((job_id, attempt, offset, bytes(body), q.get("stream"), q.get("at")))
                stored = st.logs[key]
                if offset > len(stored):
                    return self._answer(409, self._error("offset past the end", "log_refused"))
                new = body[len(stored) - offset :]
                room = st.log_cap - len(stored)
                stored += new[: max(0, room)]
                return self._answer(200, {"size": len(stored)})
        if rest == ["samples"] and st.samples_call:
            posted = json.loads(body)
            with st.lock:
                st.sample_posts.append(posted)
                have = {s["seq"] for s in st.samples[key]}
                new = [s for s in posted["samples"] if s["seq"] not in have]
                st.samples[key].extend(new)
                return self._answer(200, {"stored": len(new)})
        if rest == ["bundle"] and method == "GET":
            with st.lock:
                return self._answer(200, {"received_bytes": len(st.bundles[key])})
        if rest == ["bundle"] and method == "PUT":
            offset = int(q["offset"])
            sha = self.headers.get("X-Content-Sha256")
            with st.lock:
                if st.bundle_puts_left is not None:
                    if st.bundle_puts_left <= 0:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return None
                    st.bundle_puts_left -= 1
                st.chunk_headers.append(sha)
                data = st.bundles[key]
                if st.chunk_max is not None and len(body) > st.chunk_max:
                    return self._answer(400, {"detail": f"chunk is {len(body)} bytes; at most {st.chunk_max}",
                                              "received_bytes": len(data)})
                if sha != hashlib.sha256(body).hexdigest():
                    return self._answer(
                        400, {"detail": "checksum mismatch", "received_bytes": len(data)}
                    )
                if offset != len(data):
                    return self._answer(409, {"detail": "offset", "received_bytes": len(data)})
                data += body
                return self._answer(200, {"received_bytes": len(data)})
        if rest == ["bundle", "complete"]:
            info = json.loads(body)
            with st.lock:
                data = bytes(st.bundles[key])
                if len(data) != info["size_bytes"]:
                    return self._answer(409, {"detail": "size", "received_bytes": len(data)})
                if hashlib.sha256(data).hexdigest() != info["sha256"]:
                    return self._answer(400, {"detail": "archive checksum mismatch"})
                st.completed[key] = info
                return self._answer(200, {"size_bytes": len(data), "sha256": info["sha256"]})
        return self._answer(404, {"detail": "no such call"})


class FakeServer:
    """Start with ``with FakeServer() as server:``; ``server.url``, ``server.state``."""

    def __init__(self) -> None:
        self.state = State()
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
