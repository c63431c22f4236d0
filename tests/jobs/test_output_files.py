"""Outputs file by file (issue 16 item 2): the file list and one file's bytes, read from the
stored bundle at the file's offset. Jobs run through the services; bundles packed by the real
agent packer (a plain tar with offsets), or as an older agent's tar.gz (no offsets)."""
import hashlib
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ..drive import finished_job, rented_job

pytestmark = pytest.mark.django_db

METRICS = json.dumps({"loss": [0.9, 0.5, 0.2], "epochs": 3}).encode()
WEIGHTS = bytes(range(256)) * 40  # 10,240 bytes, every byte value
FILES = {"out/metrics.json": METRICS, "out/weights.bin": WEIGHTS, "out/deep/notes.txt": b"hello\n"}


def _job(owner, **kw):
    job, _archive = finished_job(owner, files=FILES, packer=True, **kw)
    return job


def test_it_lists_the_latest_bundles_files_with_size_checksum_and_url(api, owner, pool):
    job = _job(owner)
    body = api.get(f"/api/v1/jobs/{job.pk}/files/").json()
    assert body["attempt"] == 1 and body["rank"] == 0 and body["offsets"] is True
    listed = {f["path"]: f for f in body["files"]}
    assert set(listed) == set(FILES)
    for path, data in FILES.items():
        assert listed[path]["size_bytes"] == len(data)
        assert listed[path]["sha256"] == hashlib.sha256(data).hexdigest()
        assert listed[path]["url"] == f"http://testserver/api/v1/jobs/{job.pk}/files/{path}"


def test_one_file_comes_whole_from_the_archive_with_its_checksum_as_etag(api, owner, pool):
    job = _job(owner)
    resp = api.get(f"/api/v1/jobs/{job.pk}/files/out/weights.bin")
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content) == WEIGHTS
    assert resp["Content-Length"] == str(len(WEIGHTS))
    assert resp["ETag"] == f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'
    assert resp["Content-Disposition"] == 'attachment; filename="weights.bin"'
    assert resp["Accept-Ranges"] == "bytes"
    assert "sandbox" in resp["Content-Security-Policy"]

    meta = api.get(f"/api/v1/jobs/{job.pk}/files/out/metrics.json")
    assert meta["Content-Type"] == "application/json"
    assert meta["Content-Disposition"].startswith("attachment;")
    assert json.loads(b"".join(meta.streaming_content)) == json.loads(METRICS)
    shown = api.get(f"/api/v1/jobs/{job.pk}/files/out/metrics.json?inline=1")
    assert shown["Content-Disposition"] == 'inline; filename="metrics.json"'


def test_a_range_is_relative_to_the_file_not_the_archive(api, owner, pool):
    job = _job(owner)
    url = f"/api/v1/jobs/{job.pk}/files/out/weights.bin"
    resp = api.get(url, HTTP_RANGE="bytes=300-599")
    assert resp.status_code == 206
    assert b"".join(resp.streaming_content) == WEIGHTS[300:600]
    assert resp["Content-Range"] == f"bytes 300-599/{len(WEIGHTS)}"
    tail = api.get(url, HTTP_RANGE="bytes=-10")
    assert tail.status_code == 206 and b"".join(tail.streaming_content) == WEIGHTS[-10:]
    past = api.get(url, HTTP_RANGE=f"bytes={len(WEIGHTS)}-")
    assert past.status_code == 416 and past["Content-Range"] == f"bytes */{len(WEIGHTS)}"
    stale = api.get(url, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE='"not-the-sha"')
    assert stale.status_code == 200 and b"".join(stale.streaming_content) == WEIGHTS


def test_a_stranger_gets_404_for_the_list_and_for_a_file(api, stranger_api, owner, pool):
    job = _job(owner)
    assert stranger_api.get(f"/api/v1/jobs/{job.pk}/files/").status_code == 404
    assert stranger_api.get(f"/api/v1/jobs/{job.pk}/files/out/metrics.json").status_code == 404


def test_a_path_not_in_the_manifest_is_404(api, owner, pool):
    job = _job(owner)
    for path in ("out/nope.txt", "out/metrics.json/", "out", "manifest.json", "OUT/metrics.json"):
        resp = api.get(f"/api/v1/jobs/{job.pk}/files/{path}")
        assert resp.status_code == 404, path


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "out/../out/metrics.json", "./out/metrics.json",
                                  "/out/metrics.json", "out/deep/../metrics.json", "%2e%2e/%2e%2e/etc/passwd",
                                  "out%2Fmetrics.json%00"])
def test_a_traversal_attempt_matches_nothing(api, owner, pool, path):
    job = _job(owner)
    assert api.get(f"/api/v1/jobs/{job.pk}/files/{path}").status_code == 404


def test_a_job_without_a_bundle_is_404_and_a_bad_rank_400(api, owner, pool):
    job = _job(owner)
    assert api.get(f"/api/v1/jobs/{job.pk}/files/?rank=1").status_code == 404
    assert api.get(f"/api/v1/jobs/{job.pk}/files/?rank=x").status_code == 400
    rented = rented_job(owner)  # placed, never ran: nothing packed yet
    resp = api.get(f"/api/v1/jobs/{rented.pk}/files/")
    assert resp.status_code == 404 and "no bundle" in resp.json()["detail"]


def test_an_older_agents_tar_gz_lists_its_files_but_answers_409_for_one(api, owner, pool):
    job, _archive = finished_job(owner, files=FILES)  # tar.gz: no offsets
    body = api.get(f"/api/v1/jobs/{job.pk}/files/").json()
    assert body["offsets"] is False and {f["path"] for f in body["files"]} == set(FILES)
    resp = api.get(f"/api/v1/jobs/{job.pk}/files/out/metrics.json")
    assert resp.status_code == 409
    assert "bundle.tar.gz" in resp.json()["detail"] and "whole bundle" in resp.json()["detail"]


def test_the_schema_lists_both_routes(api, pool):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert "/api/v1/jobs/{id}/files/" in schema["paths"]
    assert "/api/v1/jobs/{id}/files/{path}" in schema["paths"]


def test_the_job_list_never_inlines_a_manifest_but_points_at_it(api, owner, pool):
    job = _job(owner)
    with CaptureQueriesContext(connection) as queries:
        listed = next(j for j in api.get("/api/v1/jobs/").json()["results"] if j["id"] == job.pk)
    assert "files" not in listed["bundle"] and listed["bundle"]["files_count"] == len(FILES)
    bundle_reads = [q["sql"] for q in queries.captured_queries if 'FROM "artifacts_bundle"' in q["sql"]]
    assert bundle_reads and not any('"artifacts_bundle"."files",' in sql or '"artifacts_bundle"."files" FROM' in sql
                                    for sql in bundle_reads)  # the manifest is counted, never read
    assert listed["bundle"]["files_url"] == f"http://testserver/api/v1/jobs/{job.pk}/files/"
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert {f["path"] for f in detail["bundle"]["files"]} == set(FILES)
    assert detail["bundle"]["files_count"] == len(FILES)
    assert detail["bundle"]["files_url"] == listed["bundle"]["files_url"]
    assert api.get(listed["bundle"]["files_url"]).status_code == 200


def test_a_stored_name_with_a_cr_or_lf_is_listed_shown_and_served_never_a_500(api, owner, pool):
    """A bundle stored before such names were refused (issue 26): the file list, the job page, the
    file's page and its download work; the download's name has ``_`` for the control characters."""
    from django.test import Client

    from apps.artifacts.models import Bundle

    job = _job(owner)
    bundle = Bundle.objects.get(job=job)
    entry = next(f for f in bundle.files if f["path"] == "out/deep/notes.txt")
    bundle.files = [*bundle.files, {**entry, "path": "out/a\nb\r.txt"}]
    bundle.save(update_fields=["files"])
    listed = api.get(f"/api/v1/jobs/{job.pk}/files/")
    assert listed.status_code == 200
    url = next(f["url"] for f in listed.json()["files"] if f["path"] == "out/a\nb\r.txt")
    assert url.endswith("/files/out/a%0Ab%0D.txt")
    assert b"".join(api.get(url).streaming_content) == b"hello\n"
    web = Client()
    web.force_login(owner)
    assert web.get(f"/jobs/{job.pk}/").status_code == 200
    assert web.get(f"/jobs/{job.pk}/files/out/a%0Ab%0D.txt").status_code == 200
    download = web.get(f"/jobs/{job.pk}/download/out/a%0Ab%0D.txt")
    assert download.status_code == 200 and download["Content-Disposition"] == 'attachment; filename="a_b_.txt"'


def test_a_range_of_5000_digits_on_the_file_and_bundle_endpoints_is_416_or_ignored(api, owner, pool):
    job = _job(owner)
    huge = "9" * 5000  # int() refuses past 4,300 digits: was a 500
    for url in (f"/api/v1/jobs/{job.pk}/files/out/weights.bin", f"/api/v1/jobs/{job.pk}/bundle/"):
        assert api.get(url, HTTP_RANGE=f"bytes={huge}-").status_code == 416, url
        assert api.get(url, HTTP_RANGE=f"bytes=0-{huge}").status_code == 206, url  # to the end
        assert api.get(url, HTTP_RANGE=f"bytes=-{huge}").status_code == 206, url  # the whole file
