"""End to end: real uvicorn, a real Celery worker and real agents run the four examples.

Each example goes in once through the API (multipart) and once through the
browser form; every one must reach released/succeeded with a bundle whose
manifest checksums match and a lease billed exactly by SPEC §4.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import re
import tarfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml
from django.conf import settings

from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
EXAMPLES = ("training", "inference", "processing", "simulation")


def token_client(base_url: str, user) -> httpx.Client:
    from apps.tokens.services import token_issue

    return httpx.Client(base_url=base_url, headers={"Authorization": f"Token {token_issue(user=user)}"}, timeout=30)


def browser_client(base_url: str, username: str) -> httpx.Client:
    """A signed-in session, the way a browser gets one."""
    client = httpx.Client(base_url=base_url, timeout=30, follow_redirects=True)
    client.get("/accounts/login/")
    client.post("/accounts/login/", data={"username": username, "password": "pw-for-tests",
                                          "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    assert "sessionid" in client.cookies
    return client


def submit_api(client: httpx.Client, name: str) -> list[int]:
    folder = Path(settings.E31_EXAMPLES_DIR) / name
    text = (folder / "job.yaml").read_text()
    refs = [d["source"].split(":", 1)[1] for d in yaml.safe_load(text)["data"]]
    files = [("files", (ref, (folder / ref).read_bytes())) for ref in refs]
    resp = client.post("/api/v1/jobs/", data={"spec": text}, files=files)
    assert resp.status_code == 201, resp.text
    body = resp.json()
    return body["job_ids"] if "job_ids" in body else [body["id"]]  # the simulation is a job array


def submit_form(client: httpx.Client, name: str) -> list[int]:
    page = client.get(f"/jobs/new/?example={name}")
    assert page.status_code == 200
    text = (Path(settings.E31_EXAMPLES_DIR) / name / "job.yaml").read_text()
    resp = client.post("/jobs/new/", data={"spec_text": text, "example": name,
                                           "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    match = re.search(r"/(jobs|arrays)/(\d+)/$", str(resp.url))
    assert match, (resp.status_code, resp.url, resp.text[:2000])
    if match.group(1) == "arrays":
        return list(Job.objects.filter(array_id=int(match.group(2))).order_by("array_index")
                    .values_list("pk", flat=True))
    return [int(match.group(2))]


def wait_released(client: httpx.Client, ids: list[int], timeout: float = 120) -> dict[int, dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = {i: client.get(f"/api/v1/jobs/{i}/").json() for i in ids}
        if all(j["state"] == "released" for j in jobs.values()):
            return jobs
        time.sleep(0.3)
    raise AssertionError({i: (j["state"], j["status_message"]) for i, j in jobs.items()})


def check_bundle(client: httpx.Client, job: dict) -> None:
    resp = client.get(f"/api/v1/jobs/{job['id']}/bundle/")
    assert resp.status_code == 200
    assert hashlib.sha256(resp.content).hexdigest() == job["bundle"]["sha256"]
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        manifest = yaml.safe_load(tar.extractfile("manifest.json").read())
        assert manifest["files"], job["name"]
        for entry in manifest["files"]:
            data = tar.extractfile(entry["path"]).read()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size_bytes"], entry["sha256"])


def check_meter(job_id: int) -> None:
    for lease in Lease.objects.filter(job_id=job_id):
        limit = lease.rented_at + timedelta(seconds=lease.time_limit_s)
        span = (min(lease.run_ended_at, limit) - lease.rented_at).total_seconds()
        assert lease.billed_seconds == math.ceil(round(span, 6))
        expected = (Decimal(lease.billed_seconds) * lease.gpu_count * lease.rate_per_gpu_hour / 3600)
        assert lease.cost == expected.quantize(Decimal("0.000001"))
        assert lease.released_at >= lease.run_ended_at >= lease.rented_at


def test_the_four_examples_run_through_api_and_form(stack):
    user = UserFactory(username="e2e")
    api = token_client(stack.url, user)
    web = browser_client(stack.url, "e2e")
    ids = [pk for name in EXAMPLES for pk in submit_api(api, name) + submit_form(web, name)]
    jobs = wait_released(api, ids)
    for job in jobs.values():
        assert job["outcome"] == "succeeded", (job["name"], job["status_message"],
                                               api.get(f"/api/v1/jobs/{job['id']}/logs/").text[-2000:])
        check_bundle(api, job)
        check_meter(job["id"])
    usage = api.get("/api/v1/usage/").json()
    assert len(usage["leases"]) == len(ids)
    assert web.get("/usage/").status_code == 200
    assert api.get("/api/v1/usage/?format=csv").text.count("\n") == len(ids) + 1


def test_failure_time_limit_and_cancel(stack):
    user = UserFactory(username="e2e2")
    api = token_client(stack.url, user)

    def submit(command: str, limit: str = "1m", gpus: int = 1, model: str = "H100") -> int:
        doc = {"name": "edge", "work": {"command": command}, "output": {"paths": ["out.txt"]},
               "compute": {"gpus": gpus, "time_limit": limit, "gpu_model": [model]}}
        resp = api.post("/api/v1/jobs/", json=doc)
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]

    failed = submit("echo partial > out.txt; exit 3")
    slow = submit("echo started > out.txt; sleep 60", limit="3s")
    jobs = wait_released(api, [failed, slow], timeout=60)
    assert (jobs[failed]["outcome"], jobs[failed]["exit_code"]) == ("failed", 3)
    assert [f["path"] for f in jobs[failed]["bundle"]["files"]] == ["out.txt"]
    assert jobs[slow]["outcome"] == "timed_out"
    assert Lease.objects.get(job_id=slow).billed_seconds == 3

    # the multi-node example (H100 + A100 nodes): its ranks send 100 MiB each way on the gang's network
    [gang] = submit_api(api, "multinode")
    job = wait_released(api, [gang], timeout=60)[gang]
    assert job["outcome"] == "succeeded", (job, api.get(f"/api/v1/jobs/{gang}/logs/?rank=1").text[-1000:])
    assert [f["path"] for r in job["bundle"]["ranks"] for f in r["files"]] == ["exchange.json"] * 2
    for rank in (0, 1):
        bundle = api.get(f"/api/v1/jobs/{gang}/bundle/?rank={rank}")
        with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
            exchanged = json.loads(tar.extractfile("exchange.json").read())
        assert exchanged["intact"] and exchanged["received_bytes"] == 100 * 2**20, exchanged
    assert Lease.objects.filter(job_id=gang).count() == 2

    blocker = submit("sleep 60", gpus=2, model="A100")
    queued = submit("echo never", gpus=2, model="A100")
    stack.wait_for(lambda: Job.objects.get(pk=blocker).state == "running", timeout=30)
    assert api.get(f"/api/v1/jobs/{queued}/").json()["queue_position"] == 1
    assert api.post(f"/api/v1/jobs/{queued}/cancel/").json()["outcome"] == "cancelled"
    assert not Lease.objects.filter(job_id=queued).exists()
    api.post(f"/api/v1/jobs/{blocker}/cancel/")
    jobs = wait_released(api, [blocker], timeout=30)
    assert jobs[blocker]["outcome"] == "cancelled"
    check_meter(blocker)
