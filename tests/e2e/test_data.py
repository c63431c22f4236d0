"""End to end, data: pre-staging while queued bills no staging, a second job stages from the cache,
and outputs never bring back links, special files or anything outside the job dir (issue 4, items 7-8).

Real uvicorn, Celery worker and agents (node-a: 4 x H100, node-b: 2 x A100) over the test database.
"""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time

import httpx
import pytest

from apps.agent_api.models import AgentReport
from apps.metering.models import Lease
from tests.factories import UserFactory

from .test_five_steps import token_client, wait_released

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
INPUT_BYTES = 4 * 1024 * 1024


def _submit(api: httpx.Client, doc: dict) -> int:
    resp = api.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _staging_reports(job_id: int) -> list[dict]:
    return [r.payload for r in AgentReport.objects.filter(job_id=job_id, type="staging").order_by("seq")]


def _bundle_members(api: httpx.Client, job_id: int) -> dict[str, bytes]:
    resp = api.get(f"/api/v1/jobs/{job_id}/bundle/")
    assert resp.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        assert all(m.isfile() for m in tar.getmembers())
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_a_pre_staged_job_bills_no_staging_and_the_next_one_stages_from_the_cache(stack):
    user = UserFactory(username="e2e-data")
    api = token_client(stack.url, user)
    payload = os.urandom(INPUT_BYTES)
    up = api.post("/api/v1/uploads/", files={"file": ("frames.bin", payload)})
    assert up.status_code == 201, up.text
    source = up.json()["source"]
    h100s = {"gpus": 4, "gpu_model": ["H100"], "time_limit": "2m"}

    holder = _submit(api, {"name": "holder", "work": {"command": "sleep 6"}, "compute": h100s})
    _wait(lambda: api.get(f"/api/v1/jobs/{holder}/").json()["state"] == "running", 30, "the holder to run")
    reader = {"name": "reader", "work": {"command": "sha256sum data/frames.bin > out.txt"},
              "data": [{"source": source, "target": "data/"}], "compute": h100s, "output": {"paths": ["out.txt"]}}
    waiting = _submit(api, reader)

    # While it waits, node-a (its reservation) fetches the input, meter off, and the page says so.
    staged = _wait(lambda: (s := api.get(f"/api/v1/jobs/{waiting}/").json())["staging"]
                   and s["staging"]["state"] == "done" and s, 30, "pre-staging")
    assert staged["state"] == "queued"
    assert staged["staging"]["nodes"] == ["node-a"]
    assert staged["staging"]["bytes_done"] == staged["staging"]["bytes_total"] == INPUT_BYTES
    assert not Lease.objects.filter(job_id=waiting).exists()  # no lease, no meter

    second = _submit(api, {**reader, "name": "reader-again"})
    jobs = wait_released(api, [holder, waiting, second], timeout=90)
    digest = hashlib.sha256(payload).hexdigest()
    for job_id in (waiting, second):
        job = jobs[job_id]
        assert job["outcome"] == "succeeded", (job["status_message"], api.get(f"/api/v1/jobs/{job_id}/logs/").text)
        assert _bundle_members(api, job_id)["out.txt"].decode().split()[0] == digest
        last = _staging_reports(job_id)[-1]
        assert (last["bytes_fetched"], last["bytes_cached"]) == (0, INPUT_BYTES)  # nothing downloaded at rent
        lease = Lease.objects.get(job_id=job_id)
        assert lease.staging_seconds == 0 and lease.billed_seconds >= 1


def test_outputs_bring_back_no_links_special_files_or_paths_outside(stack):
    user = UserFactory(username="e2e-out")
    api = token_client(stack.url, user)
    for bad in ("../escape.txt", "/etc/passwd", "a/../../b"):
        resp = api.post("/api/v1/jobs/", json={"name": "bad", "work": {"command": "true"},
                                              "compute": {"gpus": 1, "time_limit": "1m"},
                                              "output": {"paths": ["ok.txt", bad]}})
        assert resp.status_code == 400 and any(k.startswith("output.paths") for k in resp.json()), resp.text
    command = " && ".join([
        "echo fine > ok.txt", "mkdir -p sub", "echo deep > sub/deep.txt",
        "ln -s /etc etc", "ln -s /etc/passwd passwd", "ln -s /etc/hostname sub/hostname",
        "ln -s .. all-jobs", "ln -s ../../cache node-cache", "ln -s ok.txt ok-link.txt",
        "ln -s /dev/null null", "mkfifo pipe",
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
    ])
    job_id = _submit(api, {"name": "outputs", "work": {"command": command},
                           "compute": {"gpus": 1, "time_limit": "1m"}, "output": {"paths": ["**"]}})
    job = wait_released(api, [job_id], timeout=60)[job_id]
    assert job["outcome"] == "succeeded", (job["status_message"], api.get(f"/api/v1/jobs/{job_id}/logs/").text)
    members = _bundle_members(api, job_id)
    assert set(members) == {"ok.txt", "sub/deep.txt", "manifest.json"}
    assert [f["path"] for f in job["bundle"]["files"]] == ["ok.txt", "sub/deep.txt"]
    assert members["ok.txt"] == b"fine\n"
