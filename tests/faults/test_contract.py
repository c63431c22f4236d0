"""Issue 12 cases 7, 9 and 10 on the production shape, over HTTP only: what a user, a scripted
agent and an operator get from the real web process and what the ledger then holds."""
from __future__ import annotations

import hashlib
import io
import tarfile
from datetime import timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from django.utils import timezone

from apps.artifacts.models import Bundle
from apps.core.models import AccountProfile
from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.e2e.test_faults import state_of
from tests.e2e.test_five_steps import browser_client, token_client
from tests.factories import UserFactory

from .test_fencing import _scripted_agent, _submit_a100

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _run_to_exit(agent: httpx.Client, job_id: int) -> dict:
    ref = {"job_id": job_id, "attempt": 1}
    work = agent.get("/api/v1/agent/work/?wait=5").json()
    assert [a["job_id"] for a in work["assignments"]] == [job_id]
    answer = agent.post("/api/v1/agent/reports/", json={"reports": [
        {**ref, "seq": 1, "type": "running", "pid": 7},
        {**ref, "seq": 2, "type": "exited", "exit_code": 0, "reason": "exit"}]}).json()
    assert [r["status"] for r in answer["results"]] == [200, 200]
    return ref


def _archive(files: dict[str, bytes]) -> tuple[bytes, list[dict]]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    manifest = [{"path": n, "size_bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()]
    return buf.getvalue(), manifest


def test_contract_holes_are_closed_over_http(stack_with):
    stack = stack_with()
    agent = _scripted_agent(stack.url, "node-s")
    owner = UserFactory(username="contract")
    client = token_client(stack.url, owner)

    # 9a. JSON with a duplicate key is a 400 naming the key; nothing is stored.
    before = Job.objects.count()
    dup = client.post("/api/v1/jobs/", content='{"name": "d", "work": {"command": "true"}, '
                      '"compute": {"gpus": 1, "gpus": 8, "time_limit": "1m"}}',
                      headers={"Content-Type": "application/json"})
    assert dup.status_code == 400 and "duplicate key 'gpus'" in dup.json()["spec"][0]
    assert Job.objects.count() == before

    # 9b. Declared outputs, and the agent says finished with no bundle: never succeeded.
    doc = {"name": "no-bundle", "work": {"command": "true"},
           "compute": {"gpus": 1, "gpu_model": "A100", "time_limit": "1m"}, "output": {"paths": ["out/**"]}}
    job_id = client.post("/api/v1/jobs/", json=doc).json()["id"]
    ref = _run_to_exit(agent, job_id)
    agent.post("/api/v1/agent/reports/", json={"reports": [{**ref, "seq": 3, "type": "finished"}]})
    job = client.get(f"/api/v1/jobs/{job_id}/").json()
    assert (job["state"], job["outcome"]) == ("released", "failed")
    assert not Bundle.objects.filter(job_id=job_id, completed_at__isnull=False).exists()

    # 9c. A refused bundle session starts again from byte 0 (was: PUT at offset 0 -> 409).
    job_id = client.post("/api/v1/jobs/", json={**doc, "name": "retry-bundle"}).json()["id"]
    ref = _run_to_exit(agent, job_id)
    wrong, manifest = _archive({"out/a.txt": b"abd"})
    url = f"/api/v1/agent/jobs/{job_id}/bundle/?attempt=1"
    sha = hashlib.sha256(wrong).hexdigest()
    assert agent.put(url + "&offset=0", content=wrong, headers={"X-Content-Sha256": sha}).status_code == 200
    right, manifest = _archive({"out/a.txt": b"abc"})
    refused = agent.post(f"/api/v1/agent/jobs/{job_id}/bundle/complete/?attempt=1",
                         json={"size_bytes": len(wrong), "sha256": sha, "files": manifest})
    assert refused.status_code == 400 and refused.json()["received_bytes"] == 0
    sha = hashlib.sha256(right).hexdigest()
    assert agent.put(url + "&offset=0", content=right, headers={"X-Content-Sha256": sha}).status_code == 200
    assert agent.post(f"/api/v1/agent/jobs/{job_id}/bundle/complete/?attempt=1",
                      json={"size_bytes": len(right), "sha256": sha, "files": manifest}).status_code == 200
    agent.post("/api/v1/agent/reports/", json={"reports": [{**ref, "seq": 3, "type": "finished"}]})
    assert client.get(f"/api/v1/jobs/{job_id}/").json()["outcome"] == "succeeded"

    # 7. Usage by overlap under token auth, in the account's zone: the run of today counts in a
    # window of local days that contains it and not in the day before.
    AccountProfile.objects.create(owner=owner, time_zone="Pacific/Kiritimati")  # UTC+14
    lease = Lease.objects.get(job_id=job_id)
    local = timezone.localtime(lease.rented_at, timezone=ZoneInfo("Pacific/Kiritimati"))
    day = local.date()
    inside = client.get(f"/api/v1/usage/?from={day}&to={day + timedelta(days=1)}").json()
    outside = client.get(f"/api/v1/usage/?from={day - timedelta(days=1)}&to={day}").json()
    assert lease.pk in [r["lease_id"] for r in inside["leases"]]
    assert lease.pk not in [r["lease_id"] for r in outside["leases"]]

    # 10. The ledgers are read-only in the admin: no add, no edit; cancel through the action.
    UserFactory(username="boss", is_staff=True, is_superuser=True)
    admin = browser_client(stack.url, "boss")
    assert admin.get("/admin/jobs/job/add/").status_code == 403
    assert admin.get("/admin/metering/lease/add/").status_code == 403
    page = admin.get(f"/admin/jobs/job/{job_id}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.text
    victim = _submit_a100(client, "sleep 100", limit="1m")
    stack.wait_for(lambda: Lease.objects.filter(job_id=victim).exists(), timeout=30)
    admin.post("/admin/jobs/job/", data={"action": "cancel_jobs", "_selected_action": [victim],
                                         "csrfmiddlewaretoken": admin.cookies["csrftoken"]})
    assert Job.objects.get(pk=victim).cancel_requested_at is not None
    ref = {"job_id": victim, "attempt": 1}
    assert ref in agent.post("/api/v1/agent/heartbeat/", json={"running": [ref]}).json()["cancel"]
    agent.post("/api/v1/agent/reports/", json={"reports": [
        {**ref, "seq": 1, "type": "running", "pid": 9},
        {**ref, "seq": 2, "type": "finished", "exited": {"exit_code": -15, "reason": "cancelled"}}]})
    assert (state_of(victim), Job.objects.get(pk=victim).outcome) == ("released", "cancelled")
