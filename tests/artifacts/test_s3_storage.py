"""Uploads and bundles in an S3-compatible store (issue 15 item 1), against a real one (moto's server mode,
tests/s3.py): agents upload bundles straight to the store with part URLs signed for their attempt, the
side worker verifies them from the store, downloads are signed redirects the store serves with Range."""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import boto3
import httpx
import pytest
from django.core.files.base import ContentFile
from e31_agent.client import ApiClient
from e31_agent.packer import pack
from e31_agent.uploader import upload_bundle
from rest_framework.test import APIClient

from apps.artifacts.direct import bundle_direct_complete, bundle_direct_start, staging_sweep
from apps.artifacts.models import Bundle
from apps.artifacts.services import ChunkError, upload_create
from apps.artifacts.storage import object_store
from apps.artifacts.verify import BundleInvalid, verify_archive, verify_archive_stream
from apps.pool.models import Node
from apps.pool.services import node_token_issue
from tests.artifacts.test_bundle_verify import _tgz
from tests.web.factories import rented_job

MIB = 1024 * 1024


def _bucket_keys(bucket: str, endpoint: str) -> tuple[list[str], list[str]]:
    """(object keys, keys of multipart uploads in progress) of the bucket."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    return objects, uploads


def _node_client(job) -> tuple[str, APIClient]:
    lease = job.leases.get(attempt=job.attempt, node_rank=0)
    token = node_token_issue(name=lease.node.name)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return token, client


def _agent(job, calls: list[tuple[str, str]]) -> ApiClient:
    """The agent's own client, its calls answered in this process by the site (the test's database)."""
    token, client = _node_client(job)

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.url.path))
        resp = client.generic(request.method, request.url.raw_path.decode(), data=request.content,
                              content_type=request.headers.get("content-type", "application/octet-stream"),
                              HTTP_X_CONTENT_SHA256=request.headers.get("x-content-sha256", ""))
        body = b"".join(resp.streaming_content) if resp.streaming else resp.content
        return httpx.Response(resp.status_code, headers=dict(resp.items()), content=body)

    return ApiClient("http://testserver", token, transport=httpx.MockTransport(handle))


def _packed(tmp_path: Path, job_id: int, files: dict[str, bytes]):
    job_dir = tmp_path / "job"
    for name, data in files.items():
        (job_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (job_dir / name).write_bytes(data)
    return pack(job_dir, ["**"], tmp_path / "out" / "bundle.tar", job_id=job_id)


def _put_parts(offer: dict, archive: bytes) -> None:
    for part in offer["parts"]:
        data = archive[part["offset"]:part["offset"] + part["size_bytes"]]
        assert httpx.put(part["url"], content=data).status_code == 200


@pytest.fixture
def small_parts(settings):
    settings.E31_STORAGE_PART_BYTES = 5 * MIB  # S3's smallest part: a few parts for a small bundle


@pytest.mark.django_db(transaction=True)
def test_the_agent_uploads_its_bundle_straight_to_the_store_and_the_server_verifies_it(
        owner, pool, s3_storage, s3_endpoint, small_parts, tmp_path):
    job = rented_job(owner)
    files = {"model.bin": os.urandom(11 * MIB), "metrics/loss.csv": b"step,loss\n1,0.5\n"}
    packed = _packed(tmp_path, job.pk, files)
    calls: list[tuple[str, str]] = []
    upload_bundle(_agent(job, calls), job.pk, job.attempt, packed)

    bundle = Bundle.objects.get(job=job, attempt=job.attempt)
    assert bundle.completed_at and bundle.file.name == f"bundles/{job.pk}/{job.attempt}/0/bundle.tar"
    assert bundle.sha256 == packed.sha256 and bundle.size_bytes == packed.size_bytes
    assert {f["path"]: f["offset"] for f in bundle.files} == {f.path: f.offset for f in packed.files}
    # no byte of the bundle went through the site: no chunk PUT, only the small JSON calls
    assert not [c for c in calls if c[0] == "PUT"]
    assert ("POST", f"/api/v1/agent/jobs/{job.pk}/bundle/direct/") in calls
    # the kept object is the archive; nothing unverified is left in the store
    objects, uploads = _bucket_keys(s3_storage, s3_endpoint)
    assert objects == [bundle.file.name] and uploads == []
    with bundle.file.open("rb") as fh:  # the Storage API reads the same name (retention deletes by it)
        assert hashlib.sha256(fh.read()).hexdigest() == packed.sha256


@pytest.mark.django_db(transaction=True)
def test_a_tampered_part_is_refused_and_nothing_of_it_is_kept(owner, pool, s3_storage, s3_endpoint, small_parts,
                                                              tmp_path):
    job = rented_job(owner)
    packed = _packed(tmp_path, job.pk, {"weights.bin": os.urandom(7 * MIB)})
    archive = packed.path.read_bytes()
    offer = bundle_direct_start(job=job, attempt=job.attempt, size_bytes=len(archive))
    assert [p["part_number"] for p in offer["parts"]] == [1, 2]
    tampered = bytearray(archive)
    tampered[6 * MIB] ^= 0xFF  # a byte of the file's data, in part 2
    _put_parts(offer, bytes(tampered))
    bundle_direct_complete(job=job, attempt=job.attempt, size_bytes=len(archive), sha256=packed.sha256,
                           files=[f.to_json() for f in packed.files], retention_days=7)

    bundle = Bundle.objects.get(job=job, attempt=job.attempt)
    assert bundle.completed_at is None and bundle.verifying_since is None
    assert "weights.bin: sha256 in the archive differs" in bundle.refused
    assert bundle.received_bytes == 0 and not bundle.file
    assert _bucket_keys(s3_storage, s3_endpoint) == ([], [])  # the staging object is deleted
    _, node = _node_client(job)
    status = node.get(f"/api/v1/agent/jobs/{job.pk}/bundle/", {"attempt": job.attempt}).json()
    assert status == {"received_bytes": 0, "complete": False, "direct": True, "verifying": False,
                      "refused": bundle.refused}
    # the agent starts over and the honest bundle is kept
    upload_bundle(_agent(job, []), job.pk, job.attempt, packed)
    assert Bundle.objects.get(pk=bundle.pk).completed_at


@pytest.mark.django_db(transaction=True)
def test_part_urls_write_only_their_own_attempts_upload(owner, pool, s3_storage, s3_endpoint, small_parts, tmp_path):
    job_a, job_b = rented_job(owner), rented_job(owner)
    packed_b = _packed(tmp_path, job_b.pk, {"b.txt": b"bbbb" * 10})
    archive_b = packed_b.path.read_bytes()
    offer_a = bundle_direct_start(job=job_a, attempt=job_a.attempt, size_bytes=6 * MIB)
    offer_b = bundle_direct_start(job=job_b, attempt=job_b.attempt, size_bytes=len(archive_b))
    store = object_store()
    key_a = store.key(Bundle.objects.get(job=job_a).staging_name)
    key_b = store.key(Bundle.objects.get(job=job_b).staging_name)
    assert key_a.startswith(f"staging/bundles/{job_a.pk}/{job_a.attempt}/0/") and key_a != key_b
    for part in offer_a["parts"]:  # each URL names A's key and A's upload alone
        url = httpx.URL(part["url"])
        assert url.path.endswith("/" + key_a) and url.params["uploadId"] == offer_a["upload_id"]
        assert url.params["X-Amz-Signature"]  # SigV4: the key, upload id and part number are signed
    # A's URL pointed at B's key carries A's upload id: B's upload never gets the part
    forged = offer_a["parts"][0]["url"].replace(key_a, key_b)
    httpx.put(forged, content=b"x" * 100)
    assert store.parts(Bundle.objects.get(job=job_b).staging_name, offer_b["upload_id"]) == []
    _put_parts(offer_b, archive_b)
    bundle_direct_complete(job=job_b, attempt=job_b.attempt, size_bytes=len(archive_b), sha256=packed_b.sha256,
                           files=[f.to_json() for f in packed_b.files], retention_days=7)
    assert Bundle.objects.get(job=job_b).completed_at
    # and the site signs URLs only for a node's own lease: another node, or another attempt, is a 404
    lease_a = job_a.leases.get(attempt=job_a.attempt)
    other = Node.objects.exclude(pk=lease_a.node_id).first()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=other.name)}")
    if not job_b.leases.filter(node=other).exists():
        assert client.post(f"/api/v1/agent/jobs/{job_a.pk}/bundle/direct/?attempt={job_a.attempt}",
                           {"size_bytes": 10}, format="json").status_code == 404
    _, node_a = _node_client(job_a)
    assert node_a.post(f"/api/v1/agent/jobs/{job_a.pk}/bundle/direct/?attempt={job_a.attempt + 1}",
                       {"size_bytes": 10}, format="json").status_code == 404
    assert node_a.post(f"/api/v1/agent/jobs/{job_a.pk}/bundle/direct/?attempt={job_a.attempt}",
                       {"size_bytes": -1}, format="json").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_downloads_redirect_to_a_signed_url_that_honours_range(owner, stranger, api, stranger_api, pool, s3_storage,
                                                               small_parts, tmp_path):
    job = rented_job(owner)
    text = b"".join(b"line %d\n" % i for i in range(2000))
    packed = _packed(tmp_path, job.pk, {"out/log.txt": text})
    upload_bundle(_agent(job, []), job.pk, job.attempt, packed)
    archive = packed.path.read_bytes()

    resp = api.get(f"/api/v1/jobs/{job.pk}/bundle/")
    assert resp.status_code == 302 and resp["Cache-Control"] == "private, no-store"
    got = httpx.get(resp["Location"], headers={"Range": "bytes=100-199"})
    assert got.status_code == 206 and got.content == archive[100:200]
    assert f'filename="job-{job.pk}-bundle.tar"' in httpx.URL(resp["Location"]).params[
        "response-content-disposition"]  # the store names the download (signed with the URL)
    whole = httpx.get(resp["Location"])
    assert whole.status_code == 200 and whole.content == archive
    assert stranger_api.get(f"/api/v1/jobs/{job.pk}/bundle/").status_code == 404
    # one file, read from the store at its offset (a ranged GET), Range relative to the file
    one = api.get(f"/api/v1/jobs/{job.pk}/files/out/log.txt", HTTP_RANGE="bytes=5-14")
    assert one.status_code == 206 and b"".join(one.streaming_content) == text[5:15]
    assert stranger_api.get(f"/api/v1/jobs/{job.pk}/files/out/log.txt").status_code == 404


@pytest.mark.django_db
def test_agents_fetch_inputs_from_a_signed_url(owner, pool, s3_storage):
    upload = upload_create(owner=owner, name="frames.bin", fileobj=ContentFile(b"f" * 5000, name="frames.bin"))
    job = rented_job(owner, data=[{"source": upload.source, "target": "data/"}])
    _, node = _node_client(job)
    resp = node.get(f"/api/v1/agent/uploads/{upload.pk}/")
    assert resp.status_code == 302
    got = httpx.get(resp["Location"], headers={"Range": "bytes=0-9"})  # no Authorization: the URL is signed
    assert got.status_code == 206 and got.content == b"f" * 10
    stranger_node = APIClient()
    other = Node.objects.exclude(pk=job.leases.get().node_id).first()
    stranger_node.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=other.name)}")
    assert stranger_node.get(f"/api/v1/agent/uploads/{upload.pk}/").status_code == 404


@pytest.mark.django_db
def test_chunk_uploads_are_refused_cleanly_when_bundles_go_to_the_store(owner, pool, s3_storage):
    job = rented_job(owner)
    _, node = _node_client(job)
    resp = node.put(f"/api/v1/agent/jobs/{job.pk}/bundle/?attempt={job.attempt}&offset=0", b"abc",
                    content_type="application/octet-stream", HTTP_X_CONTENT_SHA256=hashlib.sha256(b"abc").hexdigest())
    assert resp.status_code == 400 and "bundle/direct/" in resp.json()["detail"]
    with pytest.raises(ChunkError, match="POST bundle/direct/ first"):
        bundle_direct_complete(job=job, attempt=job.attempt, size_bytes=3, sha256="0" * 64, files=[],
                               retention_days=7)


@pytest.mark.django_db
def test_the_sweep_drops_uploads_never_verified(owner, pool, s3_storage, s3_endpoint, small_parts, settings,
                                                django_capture_on_commit_callbacks):
    """A crash between the upload and its verification leaves nothing half-stored: the sweep aborts
    the upload, deletes the staging object, and the bundle starts over."""
    from datetime import timedelta

    from django.utils import timezone

    job, other = rented_job(owner), rented_job(owner)
    offer = bundle_direct_start(job=job, attempt=job.attempt, size_bytes=6 * MIB)
    _put_parts(offer, os.urandom(6 * MIB))
    # a joined object whose verification never ran (its task was lost)
    offer2 = bundle_direct_start(job=other, attempt=other.attempt, size_bytes=100)
    _put_parts(offer2, b"y" * 100)
    with django_capture_on_commit_callbacks(execute=False):
        bundle_direct_complete(job=other, attempt=other.attempt, size_bytes=100, sha256="1" * 64, files=[],
                               retention_days=7)
    orphan = object_store().multipart_start("staging/bundles/0/1/0/orphan.tar")  # id never saved (a crash)
    first = staging_sweep()
    assert first["bundles"] == 0  # no bundle is stale yet
    later = timezone.now() + timedelta(seconds=settings.E31_STORAGE_STAGING_MAX_AGE_S + 60)
    second = staging_sweep(now=later)
    assert second["bundles"] == 2
    # moto dates every upload's "Initiated" in 2010, so the orphan goes in either sweep
    assert first["uploads_aborted"] + second["uploads_aborted"] == 1
    assert _bucket_keys(s3_storage, s3_endpoint) == ([], [])
    for b in Bundle.objects.filter(job__in=[job, other]):
        assert (b.staging_name, b.direct_upload_id, b.verifying_since, b.refused) == ("", "", None,
                                                                                      "not verified in time")
    assert orphan


def _tar(members: list[tuple[str, bytes, bytes]], manifest: list[dict] | None = None, mode: str = "w:",
         tail: bytes = b"") -> bytes:
    """:func:`tests.artifacts.test_bundle_verify._tgz`, then ``tail`` appended."""
    return _tgz(members, manifest, mode) + tail


def _e(name: str, data: bytes) -> dict:
    return {"path": name, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


REG = tarfile.REGTYPE
CASES = {
    "good tar": (_tar([("a.txt", b"aaa", REG), ("d/b.bin", b"b" * 70000, REG)]),
                 [_e("a.txt", b"aaa"), _e("d/b.bin", b"b" * 70000)]),
    "good tar, whole blocks": (_tar([("a.bin", b"a" * 1024, REG), ("b.bin", b"b" * 5 * 1024 * 1024, REG)]),
                               [_e("a.bin", b"a" * 1024), _e("b.bin", b"b" * 5 * 1024 * 1024)]),
    "good tar.gz": (_tar([("a.txt", b"aaa", REG)], mode="w:gz"), [_e("a.txt", b"aaa")]),
    "with manifest": (_tar([("a.txt", b"aaa", REG)], manifest=[_e("a.txt", b"aaa")]), [_e("a.txt", b"aaa")]),
    "other manifest": (_tar([("a.txt", b"aaa", REG)], manifest=[_e("a.txt", b"aab")]), [_e("a.txt", b"aaa")]),
    "wrong sha": (_tar([("a.txt", b"aaa", REG)]), [_e("a.txt", b"aab")]),
    "missing file": (_tar([("a.txt", b"aaa", REG)]), [_e("a.txt", b"aaa"), _e("c.txt", b"c")]),
    "unlisted file": (_tar([("a.txt", b"aaa", REG), ("x", b"x", REG)]), [_e("a.txt", b"aaa")]),
    "symlink": (_tar([("a.txt", b"/etc/passwd", tarfile.SYMTYPE)]), []),
    "dot-dot": (_tar([("../a.txt", b"aaa", REG)]), [_e("../a.txt", b"aaa")]),
    "junk after": (_tar([("a.txt", b"aaa", REG)], tail=b"\0" * 512 + b"junk"), [_e("a.txt", b"aaa")]),
    "zeros after": (_tar([("a.txt", b"aaa", REG)], tail=b"\0" * 1024), [_e("a.txt", b"aaa")]),
    "cut short": (_tar([("a.txt", b"a" * 5000, REG)])[:2048], [_e("a.txt", b"a" * 5000)]),
    "not a tar": (b"hello world" * 100, []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_streamed_check_agrees_with_the_check_of_a_stored_file(case, tmp_path):
    archive, files = CASES[case]
    path = tmp_path / "bundle"
    path.write_bytes(archive)

    def outcome(check):
        try:
            found = check()
        except BundleInvalid:
            return "invalid"
        return (found.sha256, found.format, found.offsets)

    by_file = outcome(lambda: verify_archive(str(path), len(archive), files))
    streamed = outcome(lambda: verify_archive_stream(io.BytesIO(archive), len(archive), files))
    assert streamed == by_file
    if case.startswith("good") or case in ("with manifest", "zeros after"):
        assert streamed != "invalid" and streamed[0] == hashlib.sha256(archive).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_a_complete_whose_answer_was_lost_and_an_upload_gone_from_the_store(owner, pool, s3_storage, small_parts,
                                                                             tmp_path):
    job, other = rented_job(owner), rented_job(owner)
    packed = _packed(tmp_path, job.pk, {"a.txt": b"a" * 1000})
    archive = packed.path.read_bytes()
    offer = bundle_direct_start(job=job, attempt=job.attempt, size_bytes=len(archive))
    _put_parts(offer, archive)
    bundle = Bundle.objects.get(job=job)
    store = object_store()
    # the store joined the parts, but the site crashed before it recorded it: complete again
    store.multipart_complete(bundle.staging_name, bundle.direct_upload_id,
                             store.parts(bundle.staging_name, bundle.direct_upload_id))
    bundle_direct_complete(job=job, attempt=job.attempt, size_bytes=len(archive), sha256=packed.sha256,
                           files=[f.to_json() for f in packed.files], retention_days=7)
    assert Bundle.objects.get(pk=bundle.pk).completed_at
    # an upload aborted in the store (a lifecycle rule): start makes a new one, complete says start again
    first = bundle_direct_start(job=other, attempt=other.attempt, size_bytes=100)
    gone = Bundle.objects.get(job=other)
    store.multipart_abort(gone.staging_name, gone.direct_upload_id)
    second = bundle_direct_start(job=other, attempt=other.attempt, size_bytes=100)
    assert second["upload_id"] != first["upload_id"] and len(second["parts"]) == 1
    gone = Bundle.objects.get(job=other)
    store.multipart_abort(gone.staging_name, gone.direct_upload_id)
    with pytest.raises(ChunkError, match="start it again") as refused:
        bundle_direct_complete(job=other, attempt=other.attempt, size_bytes=100, sha256="0" * 64, files=[],
                               retention_days=7)
    assert refused.value.conflict and refused.value.received_bytes == 0


@pytest.mark.django_db
def test_a_bundle_still_being_verified_does_not_count_as_delivered(owner, pool, s3_storage, small_parts, tmp_path,
                                                                    django_capture_on_commit_callbacks):
    """The release gate: an agent that sent ``finished`` before the side worker verified its bundle
    gets no success (SPEC §3: a bundle that is not verified is not delivered)."""
    from tests.drive import Agent

    job = rented_job(owner)
    agent = Agent(job)
    agent.start()
    agent.say("exited", exit_code=0, reason="exit")
    packed = _packed(tmp_path, job.pk, {"out/a.txt": b"a" * 1000})
    archive = packed.path.read_bytes()
    _put_parts(bundle_direct_start(job=job, attempt=job.attempt, size_bytes=len(archive)), archive)
    with django_capture_on_commit_callbacks(execute=False):  # the verification task is not run
        bundle_direct_complete(job=job, attempt=job.attempt, size_bytes=len(archive), sha256=packed.sha256,
                               files=[f.to_json() for f in packed.files], retention_days=7)
    agent.say("finished")
    job.refresh_from_db()
    assert (job.state, job.outcome) == ("released", "failed")
    assert "no verified bundle" in job.status_message
