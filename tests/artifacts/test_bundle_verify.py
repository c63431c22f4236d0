"""The server verifies a bundle whole against its manifest before it keeps it (issue 4, item 8)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from apps.artifacts.http import BLOCK
from apps.artifacts.models import Bundle
from apps.artifacts.services import ChunkError, bundle_complete, bundle_put_chunk
from tests.web.factories import rented_job

pytestmark = pytest.mark.django_db


def _tgz(members: list[tuple[str, bytes, bytes]], manifest: list[dict] | None = None) -> bytes:
    """members: (name, data, tar type)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        if manifest is not None:
            body = json.dumps({"job_id": 1, "files": manifest}).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def _entry(name: str, data: bytes) -> dict:
    return {"path": name, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _complete(job, archive: bytes, files: list[dict], step: int = 1000):
    for offset in range(0, len(archive), step):
        chunk = archive[offset:offset + step]
        bundle_put_chunk(job=job, attempt=1, offset=offset, data=chunk, sha256=hashlib.sha256(chunk).hexdigest())
    return bundle_complete(job=job, attempt=1, size_bytes=len(archive),
                           sha256=hashlib.sha256(archive).hexdigest(), files=files, retention_days=7)


@pytest.fixture
def job(owner, pool):
    return rented_job(owner)


def test_a_bundle_that_matches_its_manifest_is_kept(job):
    data = {"out/a.txt": b"alpha" * 1000, "out/sub/b.bin": bytes(range(256)) * 50}
    files = [_entry(n, d) for n, d in data.items()]
    archive = _tgz([(n, d, tarfile.REGTYPE) for n, d in data.items()], manifest=files)
    bundle = _complete(job, archive, files)
    assert bundle.completed_at and bundle.files == files
    with bundle.file.open("rb") as fh:
        assert fh.read() == archive
    assert not bundle.parts.exists()


@pytest.mark.parametrize(("members", "files", "why"), [
    ([("a.txt", b"abc", tarfile.REGTYPE)], [{"path": "a.txt", "size_bytes": 4, "sha256": "0" * 64}],
     "a.txt: 3 bytes in the archive, 4 in the manifest"),
    ([("a.txt", b"abc", tarfile.REGTYPE)], [{"path": "a.txt", "size_bytes": 3, "sha256": "0" * 64}],
     "a.txt: sha256 in the archive differs"),
    ([("a.txt", b"abc", tarfile.REGTYPE), ("extra.txt", b"x", tarfile.REGTYPE)], [_entry("a.txt", b"abc")],
     "'extra.txt' is not in the manifest"),
    ([("a.txt", b"abc", tarfile.REGTYPE)], [_entry("a.txt", b"abc"), _entry("gone.txt", b"")],
     "gone.txt: in the manifest but not in the archive"),
    ([("etc", b"/etc/passwd", tarfile.SYMTYPE)], [], "'etc': not a regular file"),
    ([("fifo", b"", tarfile.FIFOTYPE)], [], "'fifo': not a regular file"),
    ([("../up.txt", b"x", tarfile.REGTYPE)], [_entry("../up.txt", b"x")], "not a plain relative path"),
    ([("/abs.txt", b"x", tarfile.REGTYPE)], [_entry("/abs.txt", b"x")], "not a plain relative path"),
])
def test_a_bundle_that_differs_from_its_manifest_is_refused(job, members, files, why):
    archive = _tgz(members)
    with pytest.raises(ChunkError, match="does not match its manifest") as caught:
        _complete(job, archive, files)
    assert why in str(caught.value)
    bundle = Bundle.objects.get(job=job, attempt=1)
    assert bundle.completed_at is None and not bundle.parts.exists()  # the session starts over
    assert bundle.received_bytes == 0 and caught.value.received_bytes == 0


def test_a_refused_session_starts_again_from_byte_zero(job):
    """Issue 12 item 9: after a refused ``complete`` a PUT at offset 0 is accepted (was a 409)."""
    files = [_entry("a.txt", b"abc")]
    wrong = _tgz([("a.txt", b"abd", tarfile.REGTYPE)], manifest=files)
    with pytest.raises(ChunkError):
        _complete(job, wrong, files)
    right = _tgz([("a.txt", b"abc", tarfile.REGTYPE)], manifest=files)
    assert _complete(job, right, files).completed_at is not None


def test_the_manifest_inside_must_agree_with_the_one_sent(job):
    files = [_entry("a.txt", b"abc")]
    archive = _tgz([("a.txt", b"abc", tarfile.REGTYPE)], manifest=[_entry("a.txt", b"abd")])
    with pytest.raises(ChunkError, match="manifest.json in the archive differs"):
        _complete(job, archive, files)


def test_something_that_is_no_tar_gz_is_refused(job):
    with pytest.raises(ChunkError, match="not a readable tar.gz"):
        _complete(job, b"plain bytes, not an archive", [])


def test_a_wrong_whole_checksum_is_refused(job):
    archive = _tgz([("a.txt", b"abc", tarfile.REGTYPE)])
    bundle_put_chunk(job=job, attempt=1, offset=0, data=archive, sha256=hashlib.sha256(archive).hexdigest())
    with pytest.raises(ChunkError, match="checksum does not match"):
        bundle_complete(job=job, attempt=1, size_bytes=len(archive), sha256="0" * 64,
                        files=[_entry("a.txt", b"abc")], retention_days=7)


def test_chunks_past_the_size_cap_are_refused(job, settings):
    settings.E31_BUNDLE_MAX_BYTES = 0
    chunk = b"x" * (2 << 20)
    with pytest.raises(ChunkError, match="exceed the site's limit"):
        bundle_put_chunk(job=job, attempt=1, offset=0, data=chunk, sha256=hashlib.sha256(chunk).hexdigest())


def test_a_chunk_sent_again_after_a_lost_answer_is_kept_once(job):
    files = [_entry("a.txt", b"abc" * 1000)]
    archive = _tgz([("a.txt", b"abc" * 1000, tarfile.REGTYPE)], manifest=files)
    half = len(archive) // 2
    first, rest = archive[:half], archive[half:]
    sha = hashlib.sha256
    bundle_put_chunk(job=job, attempt=1, offset=0, data=first, sha256=sha(first).hexdigest())
    assert bundle_put_chunk(job=job, attempt=1, offset=0, data=first, sha256=sha(first).hexdigest()) == half
    with pytest.raises(ChunkError) as caught:
        bundle_put_chunk(job=job, attempt=1, offset=half + 5, data=rest, sha256=sha(rest).hexdigest())
    assert caught.value.conflict and caught.value.received_bytes == half
    bundle_put_chunk(job=job, attempt=1, offset=half, data=rest, sha256=sha(rest).hexdigest())
    bundle = bundle_complete(job=job, attempt=1, size_bytes=len(archive), sha256=sha(archive).hexdigest(),
                             files=files, retention_days=7)
    with bundle.file.open("rb") as fh:
        assert fh.read() == archive


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_download_streams_in_blocks(owner, pool):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    from apps.tokens.services import token_issue

    job = rented_job(owner)
    data = os.urandom(10_000_000)  # incompressible: several 4 MiB blocks
    files = [_entry("w.bin", data)]
    archive = _tgz([("w.bin", data, tarfile.REGTYPE)], manifest=files)
    _complete(job, archive, files, step=1 << 20)
    client = AsyncClient()
    auth = f"Token {token_issue(user=owner)}"

    async def fetch(**headers) -> tuple[int, dict, list[bytes]]:
        resp = await client.get(f"/api/v1/jobs/{job.pk}/bundle/", headers={"Authorization": auth, **headers})
        return resp.status_code, resp, [b async for b in resp.streaming_content]

    status, whole, blocks = async_to_sync(fetch)()
    assert status == 200 and b"".join(blocks) == archive and whole["Content-Length"] == str(len(archive))
    assert len(blocks) > 1 and max(len(b) for b in blocks) <= BLOCK
    status, _, blocks = async_to_sync(fetch)(Range="bytes=10-2000009")
    assert status == 206 and b"".join(blocks) == archive[10:2000010]
