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


def _tgz(members: list[tuple[str, bytes, bytes]], manifest: list[dict] | None = None, mode: str = "w:") -> bytes:
    """An archive of ``members`` ((name, data, tar type)): a plain tar as agents pack it now, or
    with ``mode="w:gz"`` the tar.gz of an older agent."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
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


@pytest.fixture(params=["w:", "w:gz"], ids=["tar", "old-tar.gz"])
def mode(request) -> str:
    """Both archive formats the server accepts: the plain tar, and an older agent's tar.gz."""
    return request.param


def test_a_bundle_that_matches_its_manifest_is_kept(job, mode):
    data = {"out/a.txt": b"alpha" * 1000, "out/sub/b.bin": bytes(range(256)) * 50}
    files = [_entry(n, d) for n, d in data.items()]
    archive = _tgz([(n, d, tarfile.REGTYPE) for n, d in data.items()], manifest=files, mode=mode)
    bundle = _complete(job, archive, files)
    assert bundle.completed_at and [{k: f[k] for k in ("path", "size_bytes", "sha256")} for f in bundle.files] == files
    assert bundle.file.name.endswith("/bundle.tar" if mode == "w:" else "/bundle.tar.gz")
    with bundle.file.open("rb") as fh:
        assert fh.read() == archive
    assert not bundle.parts.exists()
    if mode == "w:gz":
        assert not any("offset" in f for f in bundle.files)  # a gzip stream has no offsets


def test_the_kept_manifest_gives_each_files_offset_in_the_archive(job):
    """Issue 16 item 2: reading offset..offset+size of the stored archive gives the file's bytes."""
    data = {"a.txt": b"", "weights.bin": os.urandom(3_000_000), "x/" + "long" * 60 + ".json": b'{"k": 1}'}
    files = [_entry(n, d) for n, d in data.items()]
    archive = _tgz([(n, d, tarfile.REGTYPE) for n, d in data.items()], manifest=files)
    bundle = _complete(job, archive, files, step=1 << 20)
    with bundle.file.open("rb") as fh:
        for f in bundle.files:
            fh.seek(f["offset"])
            got = fh.read(f["size_bytes"])
            assert got == data[f["path"]] and hashlib.sha256(got).hexdigest() == f["sha256"]


def test_the_agents_packer_output_verifies(job, tmp_path):
    """The agent's own archive (packer.pack), offsets it claims equal to the ones found."""
    from e31_agent.packer import pack

    (tmp_path / "job" / "out").mkdir(parents=True)
    (tmp_path / "job" / "out" / "w.bin").write_bytes(os.urandom(5_000_000))
    (tmp_path / "job" / "metrics.json").write_text('{"acc": 1}')
    packed = pack(tmp_path / "job", ["**"], tmp_path / "b.tar", job_id=job.pk)
    files = [f.to_json() for f in packed.files]
    bundle = _complete(job, packed.path.read_bytes(), files, step=1 << 20)
    assert bundle.files == files and bundle.sha256 == packed.sha256


@pytest.mark.parametrize("how", ["flip a byte of a file", "flip a byte of a header", "cut the end",
                                 "a member hidden after a bad header", "an offset that lies"])
def test_a_tampered_archive_is_refused(job, how):
    data = os.urandom(20_000)
    files = [_entry("w.bin", data)]
    archive = bytearray(_tgz([("w.bin", data, tarfile.REGTYPE)], manifest=files))
    sent = [dict(f) for f in files]
    if how == "flip a byte of a file":
        archive[512 + 100] ^= 1
    elif how == "flip a byte of a header":
        archive[0] ^= 1  # the name: the checksum in the header no longer matches
    elif how == "cut the end":
        archive = archive[:512 + 10_000]
    elif how == "a member hidden after a bad header":
        end = archive.rindex(b"}") // 512 * 512 + 512  # just after manifest.json's data
        archive[end:end + 512] = b"\xff" * 512
        archive += _tgz([("../evil", b"x", tarfile.REGTYPE)])
    else:
        sent[0]["offset"] = 1024
    why = {"flip a byte of a file": "w.bin: sha256 in the archive differs",
           "flip a byte of a header": "not a readable tar",
           "cut the end": "'w.bin': its data runs past the end of the archive",
           "a member hidden after a bad header": "data after the end of the archive",
           "an offset that lies": "w.bin: its data is at byte 512 of the archive, not 1024"}[how]
    with pytest.raises(ChunkError, match="does not match its manifest") as caught:
        _complete(job, bytes(archive), sent)
    assert why in str(caught.value)
    assert not Bundle.objects.get(job=job, attempt=1).completed_at


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
def test_a_bundle_that_differs_from_its_manifest_is_refused(job, members, files, why, mode):
    archive = _tgz(members, mode=mode)
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


def test_the_manifest_inside_must_agree_with_the_one_sent(job, mode):
    files = [_entry("a.txt", b"abc")]
    archive = _tgz([("a.txt", b"abc", tarfile.REGTYPE)], manifest=[_entry("a.txt", b"abd")], mode=mode)
    with pytest.raises(ChunkError, match="manifest.json in the archive differs"):
        _complete(job, archive, files)


def test_something_that_is_no_tar_is_refused(job):
    with pytest.raises(ChunkError, match="not a readable tar"):
        _complete(job, b"plain bytes, not an archive", [])


def test_a_gzip_that_is_no_tar_is_refused(job):
    import gzip

    with pytest.raises(ChunkError, match="not a readable tar.gz"):
        _complete(job, gzip.compress(b"plain bytes, not an archive" * 100), [])


def test_a_wrong_whole_checksum_is_refused(job):
    archive = _tgz([("a.txt", b"abc", tarfile.REGTYPE)])
    bundle_put_chunk(job=job, attempt=1, offset=0, data=archive, sha256=hashlib.sha256(archive).hexdigest())
    with pytest.raises(ChunkError, match="checksum does not match"):
        bundle_complete(job=job, attempt=1, size_bytes=len(archive), sha256="0" * 64,
                        files=[_entry("a.txt", b"abc")], retention_days=7)


def test_chunks_past_the_size_cap_are_refused(job, settings):
    from apps.artifacts.services import MANIFEST_FILES_MAX, bundle_max_bytes

    settings.E31_BUNDLE_MAX_BYTES = 0
    # room for headers (a plain tar's are not compressed) of as many files as a manifest may list
    assert bundle_max_bytes() == (1 << 20) + MANIFEST_FILES_MAX * 6 * 512
    chunk = b"x" * (2 << 20)
    with pytest.raises(ChunkError, match="exceed the site's limit"):
        bundle_put_chunk(job=job, attempt=1, offset=bundle_max_bytes() - len(chunk) + 1, data=chunk,
                         sha256=hashlib.sha256(chunk).hexdigest())


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


def test_a_chunk_with_a_wrong_checksum_is_refused_and_leaves_nothing(job):
    """The chunk is hashed while it is written; a refused one is cut off again."""
    from django.core.files.storage import default_storage

    from apps.artifacts.services import _partial_name

    first = os.urandom(1000)
    bundle_put_chunk(job=job, attempt=1, offset=0, data=first, sha256=hashlib.sha256(first).hexdigest())
    second = os.urandom(5000)
    with pytest.raises(ChunkError, match="chunk checksum does not match") as caught:
        bundle_put_chunk(job=job, attempt=1, offset=1000, data=second, sha256="0" * 64)
    assert not caught.value.conflict and caught.value.received_bytes == 1000
    assert os.path.getsize(default_storage.path(_partial_name(job, 1, 0))) == 1000
    assert Bundle.objects.get(job=job, attempt=1).received_bytes == 1000


def test_chunks_of_32_mib_are_taken(job):
    from apps.artifacts.services import CHUNK_MAX_BYTES

    chunk = os.urandom(CHUNK_MAX_BYTES)
    assert CHUNK_MAX_BYTES == 32 * 1024 * 1024
    assert bundle_put_chunk(job=job, attempt=1, offset=0, data=chunk,
                            sha256=hashlib.sha256(chunk).hexdigest()) == CHUNK_MAX_BYTES
    with pytest.raises(ChunkError, match="at most"):
        bundle_put_chunk(job=job, attempt=1, offset=CHUNK_MAX_BYTES, data=chunk + b"x",
                         sha256=hashlib.sha256(chunk + b"x").hexdigest())
