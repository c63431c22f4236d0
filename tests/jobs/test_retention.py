"""Retention kept (issue 15): the storage sweep on a frozen clock.

Jobs are driven through the services (tests/drive.py); the clock moves between steps.
"""
from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import call_command
from django.db import connection
from django.test import Client

from apps.agent_api.models import AgentReport
from apps.agent_api.retention import storage_report, sweep_storage
from apps.artifacts.models import Bundle, Upload
from apps.artifacts.services import upload_create
from apps.jobs.models import LogChunk
from apps.jobs.services.submit import job_submit
from apps.jobs.spec import SpecError
from tests.drive import Agent, finished_job, rented_job, spec_doc
from tests.factories import UserFactory

FILES = {"out/result.txt": b"forty-two\n" * 100, "out/model.bin": b"\0" * 4096}
DAY = timedelta(days=1)


def kinds(report) -> dict[str, tuple[int, int]]:
    return {k.kind: (k.count, k.bytes) for k in report.kinds}


def done(owner, clock, **kw):
    """A job run to release with FILES packed by the agent's packer (a plain tar with offsets)."""
    job, _archive = finished_job(owner, clock=clock, files=FILES, packer=True, **kw)
    return job, Bundle.objects.get(job=job)


def web(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- bundles ------------------------------------------------------------------------------------
def test_bundle_expires_at_its_boundary_not_before(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    name, size = bundle.file.name, bundle.size_bytes
    assert bundle.expires_at == bundle.completed_at + 7 * DAY
    frozen_clock.set(bundle.expires_at - timedelta(seconds=1))
    assert kinds(sweep_storage())["bundles"] == (0, 0)
    assert default_storage.exists(name)

    frozen_clock.advance(1)
    report = sweep_storage()
    assert kinds(report)["bundles"] == (1, size)
    assert not default_storage.exists(name)
    bundle.refresh_from_db()
    assert bundle.expired_at == frozen_clock.now()
    assert not bundle.file
    assert {f["path"] for f in bundle.files} == set(FILES)  # the manifest stays
    assert bundle.sha256 and bundle.size_bytes == size


def test_dry_run_deletes_nothing_and_says_what_a_sweep_would(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    frozen_clock.set(bundle.expires_at + DAY)
    out = StringIO()
    call_command("sweep_storage", "--dry-run", stdout=out)
    assert f"bundles: would delete 1 ({bundle.size_bytes} bytes)" in out.getvalue()
    assert "logs: would delete 1 (6 bytes)" in out.getvalue()  # "hello\n"
    assert default_storage.exists(bundle.file.name)
    bundle.refresh_from_db()
    assert bundle.expired_at is None and bundle.file
    assert LogChunk.objects.filter(job=job).exists()

    out = StringIO()
    call_command("sweep_storage", stdout=out)
    assert f"bundles: deleted 1 ({bundle.size_bytes} bytes)" in out.getvalue()


def test_a_second_sweep_is_a_no_op(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    upload_create(owner=owner, name="unused.csv", fileobj=ContentFile(b"a,b\n", name="unused.csv"))
    frozen_clock.advance(days=40)
    first = kinds(sweep_storage())
    assert first["bundles"][0] == 1 and first["uploads"][0] == 1 and first["logs"][0] == 1
    expired_at = Bundle.objects.get(pk=bundle.pk).expired_at
    frozen_clock.advance(days=1)
    second = sweep_storage()
    assert all(k.count == 0 and k.bytes == 0 for k in second.kinds), second.lines()
    assert Bundle.objects.get(pk=bundle.pk).expired_at == expired_at  # stamped once


def test_an_object_already_gone_does_not_crash_the_sweep(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    default_storage.delete(bundle.file.name)
    frozen_clock.set(bundle.expires_at)
    swept = {k.kind: k for k in sweep_storage().kinds}["bundles"]
    assert (swept.count, swept.bytes, swept.missing) == (1, 0, 1)
    assert Bundle.objects.get(pk=bundle.pk).expired_at is not None


def test_each_jobs_retention_days_or_the_site_default_set_when_its_log_expires(frozen_clock, owner, pool,
                                                                                 settings):
    """The spec's output.retention_days (the site default when it gives none) is kept on the job; its
    log data expires that many days after release (the agent endpoint completes the bundle with
    the same days)."""
    short, _ = finished_job(owner, clock=frozen_clock, output={"paths": ["out/**"], "retention_days": 2})
    default, _ = finished_job(owner, clock=frozen_clock)
    assert short.spec["output"]["retention_days"] == 2
    assert default.spec["output"]["retention_days"] == settings.E31_RETENTION_DAYS_DEFAULT == 7
    frozen_clock.advance(days=2)
    assert kinds(sweep_storage())["logs"] == (1, 6)
    assert not LogChunk.objects.filter(job=short).exists() and LogChunk.objects.filter(job=default).exists()
    frozen_clock.advance(days=5)
    assert kinds(sweep_storage())["logs"] == (1, 6)


# --- what the owner sees after expiry -------------------------------------------------------------
def test_job_page_says_outputs_expired_and_keeps_manifest_and_receipt(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    page = web(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "Download bundle" in page and "Kept until" in page
    frozen_clock.set(bundle.expires_at)
    sweep_storage()
    page = web(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f"Outputs expired on {frozen_clock.now():%b} {frozen_clock.now().day}, {frozen_clock.now().year}" in page
    assert "Download bundle" not in page and "Kept until" not in page
    assert "out/result.txt" in page  # the manifest stays
    assert f"/jobs/{job.pk}/files/" not in page  # without links to files that are gone
    assert web(owner).get(f"/usage/receipts/{job.pk}/").status_code == 200  # the receipt stays
    resp = web(owner).get(f"/jobs/{job.pk}/bundle/")
    assert resp.status_code == 410 and b"expired on" in resp.content


def test_job_page_says_when_the_log_expired(frozen_clock, owner, pool):
    job, _bundle = done(owner, frozen_clock)
    assert "hello" in web(owner).get(f"/jobs/{job.pk}/").content.decode()
    frozen_clock.set(job.released_at + 7 * DAY)
    sweep_storage()
    page = web(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f"The log expired on {frozen_clock.now():%b} {frozen_clock.now().day}" in page
    assert "No output yet" not in page


def test_api_answers_410_gone_after_expiry_and_404_to_others(frozen_clock, owner, pool, api, stranger_api):
    job, bundle = done(owner, frozen_clock)
    assert api.get(f"/api/v1/jobs/{job.pk}/bundle/").status_code == 200
    frozen_clock.set(bundle.expires_at)
    sweep_storage()
    resp = api.get(f"/api/v1/jobs/{job.pk}/bundle/")
    assert resp.status_code == 410
    assert "expired on" in resp.json()["detail"] and resp.json()["expired_at"]
    resp = api.get(f"/api/v1/jobs/{job.pk}/files/")
    assert resp.status_code == 410
    assert {f["path"] for f in resp.json()["files"]} == set(FILES)  # the manifest stays
    assert api.get(f"/api/v1/jobs/{job.pk}/files/out/result.txt").status_code == 410
    assert api.get(f"/api/v1/jobs/{job.pk}/").status_code == 200  # the job and its ledger stay
    for url in ("bundle/", "files/", "files/out/result.txt"):
        assert stranger_api.get(f"/api/v1/jobs/{job.pk}/{url}").status_code == 404


# --- uploads --------------------------------------------------------------------------------------
def _upload(owner, name="data.csv", data=b"x,y\n1,2\n") -> Upload:
    return upload_create(owner=owner, name=name, fileobj=ContentFile(data, name=name))


def test_unreferenced_upload_kept_for_the_grace_period(frozen_clock, owner, settings):
    upload = _upload(owner)
    frozen_clock.advance(days=settings.E31_UPLOAD_GRACE_DAYS, seconds=-1)
    assert kinds(sweep_storage())["uploads"] == (0, 0)
    assert default_storage.exists(upload.file.name)
    frozen_clock.advance(1)
    assert kinds(sweep_storage())["uploads"] == (1, upload.size_bytes)
    assert not Upload.objects.filter(pk=upload.pk).exists()
    assert not default_storage.exists(upload.file.name)


def test_referenced_upload_kept_while_its_job_lives(frozen_clock, owner, pool):
    upload = _upload(owner)
    job = rented_job(owner, data=[{"source": upload.source, "target": "./in/"}])
    frozen_clock.advance(days=10)
    assert kinds(sweep_storage())["uploads"] == (0, 0)  # its job still runs
    Agent(job, frozen_clock).run(files={})
    frozen_clock.advance(days=6)
    assert kinds(sweep_storage())["uploads"] == (0, 0)  # released, not yet expired: may be re-run
    frozen_clock.advance(days=2)
    assert kinds(sweep_storage())["uploads"] == (1, upload.size_bytes)


def test_a_submit_naming_a_swept_upload_is_told_it_is_gone(frozen_clock, owner, pool, settings):
    upload = _upload(owner)
    frozen_clock.advance(days=settings.E31_UPLOAD_GRACE_DAYS)
    sweep_storage()
    with pytest.raises(SpecError) as err:
        job_submit(owner=owner, document=spec_doc(data=[{"source": upload.source, "target": "./"}]))
    assert "data[0].source" in err.value.errors


def test_a_strangers_job_naming_my_upload_neither_keeps_nor_touches_it(frozen_clock, owner, stranger, pool,
                                                                         settings):
    mine = _upload(owner)
    theirs = _upload(stranger, "theirs.csv")
    with pytest.raises(SpecError):  # refused: not the stranger's upload
        job_submit(owner=stranger, document=spec_doc(data=[{"source": mine.source, "target": "./"}]))
    rented_job(stranger, data=[{"source": theirs.source, "target": "./"}])
    frozen_clock.advance(days=settings.E31_UPLOAD_GRACE_DAYS)
    sweep_storage()
    assert not Upload.objects.filter(pk=mine.pk).exists()  # unreferenced: swept on time
    assert Upload.objects.filter(pk=theirs.pk).exists()  # the stranger's running job keeps theirs


# --- logs and agent reports -------------------------------------------------------------------------
def test_logs_and_compacted_log_objects_expire_with_the_job(frozen_clock, owner, pool):
    job, _bundle = done(owner, frozen_clock)
    frozen_clock.advance(days=1)
    later, _ = done(owner, frozen_clock, log=b"later\n")
    name = default_storage.save(f"logs/{job.pk}/1/0/log.txt", ContentFile(b"compacted log\n"))
    kept = default_storage.save(f"logs/{later.pk}/1/0/log.txt", ContentFile(b"later log\n"))
    frozen_clock.set(job.released_at + 7 * DAY - timedelta(seconds=1))
    assert kinds(sweep_storage())["logs"] == (0, 0)
    frozen_clock.set(job.released_at + 7 * DAY)
    assert kinds(sweep_storage())["logs"] == (2, 6 + 14)  # one chunk, one compacted object
    assert not LogChunk.objects.filter(job=job).exists() and not default_storage.exists(name)
    assert LogChunk.objects.filter(job=later).exists() and default_storage.exists(kept)


def test_agent_reports_of_released_jobs_go_after_their_window(frozen_clock, owner, pool, settings):
    job, _bundle = done(owner, frozen_clock)
    running = rented_job(owner)
    Agent(running, frozen_clock).start()
    n = AgentReport.objects.filter(job=job).count()
    assert n and AgentReport.objects.filter(job=running).count()
    frozen_clock.advance(days=settings.E31_AGENT_REPORTS_KEEP_DAYS)
    assert kinds(sweep_storage())["agent_reports"][0] == n
    assert not AgentReport.objects.filter(job=job).exists()
    assert AgentReport.objects.filter(job=running).exists()  # its job still runs: they guard duplicates


# --- the operator's view ------------------------------------------------------------------------------
def test_operator_report_shows_storage_by_kind_and_what_the_sweep_frees(frozen_clock, owner, pool):
    job, bundle = done(owner, frozen_clock)
    frozen_clock.set(bundle.expires_at)
    rows = {r.kind: r for r in storage_report()}
    assert (rows["bundles"].count, rows["bundles"].bytes) == (1, bundle.size_bytes)
    assert (rows["bundles"].free_count, rows["bundles"].free_bytes) == (1, bundle.size_bytes)
    assert rows["logs"].bytes == 6 and rows["agent_reports"].count > 0
    staff = UserFactory(username="operator", is_staff=True)
    page = web(staff).get("/usage/report/")
    assert page.status_code == 200
    assert b"Next sweep frees" in page.content and b"Agent reports" in page.content
    title = page.content.split(b"<title>")[1].split(b"</title>")[0]
    assert b"<" not in title and page.content.count(b'id="storage-title"') == 1  # the table once, in the body
    assert web(owner).get("/usage/report/").status_code == 403


# --- two sweeps at once -----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_delete_each_thing_once(frozen_clock, owner, pool):
    """Each sweep takes its rows with SKIP LOCKED: run together, they count every bundle once."""
    bundles = []
    for _ in range(3):
        bundles.append(done(owner, frozen_clock)[1])
        frozen_clock.advance(60)
    frozen_clock.advance(days=8)
    barrier = threading.Barrier(2)
    reports = []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            reports.append(sweep_storage(now=frozen_clock.now()))
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(reports) == 2
    assert sum(kinds(r)["bundles"][0] for r in reports) == 3
    assert sum(kinds(r)["bundles"][1] for r in reports) == sum(b.size_bytes for b in bundles)
    assert sum(kinds(r)["logs"][0] for r in reports) == 3
    assert Bundle.objects.filter(expired_at__isnull=True).count() == 0
