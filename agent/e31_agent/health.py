"""The agent's own probes (issue 26 item 2): ``e31-agent --health-port PORT`` serves two paths
on ``--health-host`` (default 127.0.0.1), as the site's ``/healthz`` and ``/readyz`` do:

- ``/healthz``: 200 while the agent's loops live (a liveness probe: a supervisor restarts the
  agent when it fails), 503 once a loop it started (heartbeat, work poll) has died;
- ``/readyz``: 200 when the agent is registered and has heard from the server within
  :data:`READY_BEATS` heartbeat intervals, else 503 (the node takes no work meanwhile).

Each body is ``{"status": "ok" | "failing", "checks": {name: "ok" | "failing"}}``; nothing else
(no server address, token or job) is said. The checks only read the agent's fields, so a probe
costs no call to the server. Standard library only (``http.server``), in a daemon thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

READY_BEATS = 3  # heartbeat intervals without an answer from the server before /readyz fails

Checks = Callable[[], dict[str, bool]]


class HealthServer:
    """``/healthz`` answered from ``liveness()``, ``/readyz`` from ``readiness()``: each returns
    ``{check name: passed}``. :meth:`start` binds (``port`` 0: any free port, see :attr:`port`)."""

    def __init__(self, *, liveness: Checks, readiness: Checks, host: str = "127.0.0.1", port: int = 0) -> None:
        probes = {"/healthz": liveness, "/readyz": readiness}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                probe = probes.get(self.path.split("?", 1)[0])
                if probe is None:
                    return self._answer(404, {"status": "not found"})
                try:
                    checks = probe()
                except Exception:  # a probe reports, it does not fail
                    log.warning("health probe %s failed", self.path, exc_info=True)
                    checks = {"probe": False}
                ok = all(checks.values())
                self._answer(200 if ok else 503, {"status": "ok" if ok else "failing",
                                                  "checks": {k: "ok" if v else "failing" for k, v in checks.items()}})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
                pass  # a probe every few seconds is no log line

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the free one picked for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="health", daemon=True)
        self._thread.start()
        log.info("health probes on http://%s:%d/healthz and /readyz", *self._server.server_address[:2])
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
