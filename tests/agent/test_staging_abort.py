"""A cancel (or the deadline) during a fetch cuts the transfer at once, even from a source that
trickles bytes and would hold each read until its timeout (issue 12 case 5)."""
from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from e31_agent.models import DataItem
from e31_agent.netguard import AddressPolicy
from e31_agent.staging import Stager, StagingAborted


class Trickle(http.server.BaseHTTPRequestHandler):
    """Announces 50 MB, then sends a byte every 0.5 s."""

    stop = threading.Event()

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "50000000")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self.do_HEAD()
        try:
            while not self.stop.wait(0.5):
                self.wfile.write(b"x")
                self.wfile.flush()
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def trickle_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/big.bin"
    Trickle.stop.set()
    server.shutdown()
    server.server_close()


def test_a_cancel_cuts_a_trickling_http_fetch_at_once(tmp_path: Path, trickle_url: str):
    job = tmp_path / "job"
    job.mkdir()
    cancel = threading.Event()
    stager = Stager(client=None, job_dir=job, tmp_dir=tmp_path / "tmp", cache=None,
                    net_policy=AddressPolicy.parse(["127.0.0.1"]), should_stop=cancel.is_set)
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(StagingAborted):
        stager.stage([DataItem(source=trickle_url)])
    assert time.monotonic() - started < 2.0  # not the 60 s read timeout, not a 1 MiB chunk
    assert list((tmp_path / "tmp").iterdir()) == []  # the partial download is gone
