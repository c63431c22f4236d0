"""Bundle upload: verified chunks, resumed after failures, against a real HTTP server."""

import hashlib
import os
from pathlib import Path

import pytest
from e31_agent.backoff import Backoff
from e31_agent.client import ApiClient, StaleAttempt
from e31_agent.packer import pack
from e31_agent.uploader import UploadError, _send_from, upload_bundle

from .fake_server import TOKEN, FakeServer

CHUNK = 4096


@pytest.fixture
def server():
    with FakeServer() as server:
        yield server


@pytest.fixture
def client(server):
    client = ApiClient(server.url, TOKEN, backoff=lambda: Backoff(initial_s=0.01, max_s=0.05))
    yield client
    client.close()


@pytest.fixture
def bundle(tmp_path: Path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "weights.bin").write_bytes(os.urandom(5 * CHUNK + 123))  # incompressible
    (job / "metrics.json").write_text('{"loss": 0.1}')
    return pack(job, ["*"], tmp_path / "bundle.tar", job_id=5)


def _puts(server) -> int:
    return sum(1 for m, p in server.state.calls if m == "PUT")


def test_it_uploads_in_verified_chunks(server, client, bundle):
    upload_bundle(client, 5, 1, bundle, chunk_bytes=CHUNK)
    stored = bytes(server.state.bundles[(5, 1)])
    assert stored == bundle.path.read_bytes()
    done = server.state.completed[(5, 1)]
    assert done["sha256"] == bundle.sha256 and done["size_bytes"] == bundle.size_bytes
    assert {f["path"] for f in done["files"]} == {"weights.bin", "metrics.json"}
    # every chunk carried the sha256 of exactly its bytes
    chunks = [stored[i : i + CHUNK] for i in range(0, len(stored), CHUNK)]
    assert server.state.chunk_headers == [hashlib.sha256(c).hexdigest() for c in chunks]


def test_it_resumes_after_failed_chunks(server, client, bundle):
    # a 500, a dropped connection, a 503, then a chunk refused for its checksum
    server.state.fail[("PUT", "/api/v1/agent/jobs/5/bundle/")] = [500, 0, 503, 400]
    upload_bundle(client, 5, 1, bundle, chunk_bytes=CHUNK)
    assert bytes(server.state.bundles[(5, 1)]) == bundle.path.read_bytes()
    assert (5, 1) in server.state.completed


def test_it_resumes_from_what_the_server_holds(server, client, bundle):
    data = bundle.path.read_bytes()
    server.state.bundles[(5, 1)] += data[: 2 * CHUNK]  # an earlier run got this far
    upload_bundle(client, 5, 1, bundle, chunk_bytes=CHUNK)
    assert bytes(server.state.bundles[(5, 1)]) == data
    expected = -(-(len(data) - 2 * CHUNK) // CHUNK)
    assert _puts(server) == expected


def test_it_follows_the_servers_offset_on_409(server, client, bundle):
    data = bundle.path.read_bytes()
    server.state.bundles[(5, 1)] += data[:CHUNK]
    with open(bundle.path, "rb") as fh:
        _send_from(client, 5, 1, bundle, fh, 0, CHUNK, None)  # we think 0, it holds CHUNK
    assert bytes(server.state.bundles[(5, 1)]) == data


def test_a_checksum_that_never_matches_gives_up(server, client, bundle):
    server.state.fail[("PUT", "/api/v1/agent/jobs/5/bundle/")] = [400] * 10
    with pytest.raises(UploadError, match="refused 4 times"):
        upload_bundle(client, 5, 1, bundle, chunk_bytes=CHUNK)


def test_a_stale_attempt_stops_the_upload(server, client, bundle):
    server.state.stale.add((5, 1))
    with pytest.raises(StaleAttempt):
        upload_bundle(client, 5, 1, bundle, chunk_bytes=CHUNK)


def test_it_sends_32_mib_chunks_and_falls_back_to_8_for_an_older_server(server, client, tmp_path: Path):
    """Issue 15: fewer, larger chunks; a server that takes at most 8 MiB still gets the bundle."""
    from e31_agent.uploader import CHUNK_BYTES, OLD_CHUNK_BYTES

    job = tmp_path / "job"
    job.mkdir()
    (job / "weights.bin").write_bytes(os.urandom(CHUNK_BYTES + OLD_CHUNK_BYTES))
    big = pack(job, ["*"], tmp_path / "big.tar", job_id=5)
    upload_bundle(client, 5, 1, big)
    assert bytes(server.state.bundles[(5, 1)]) == big.path.read_bytes()
    assert _puts(server) == 2  # 32 MiB, then the rest

    server.state.chunk_max = OLD_CHUNK_BYTES
    upload_bundle(client, 5, 2, big)
    assert bytes(server.state.bundles[(5, 2)]) == big.path.read_bytes() and (5, 2) in server.state.completed
    puts = [p for m, p in server.state.calls if m == "PUT"][2:]
    assert len(puts) == 1 + -(-big.size_bytes // OLD_CHUNK_BYTES)  # the refused 32 MiB one, then 8 MiB ones
