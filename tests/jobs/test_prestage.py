"""Pre-staging on the planned node, staging seconds on the lease, progress on the page and API."""
from __future__ import annotations

import re

import pytest
from django.core.files.base import ContentFile
from rest_framework.test import APIClient

from apps.agent_api.reports import agent_report
from apps.agent_api.selectors import agent_work_for
from apps.artifacts.services import upload_create
from apps.jobs.inputs import owner_scope
from apps.jobs.models import Job, JobPrestage
from apps.jobs.prestage import prestage_mark_offered, staging_progress
from apps.jobs.services.cancel import job_cancel
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease
from apps.pool.models import Node
from apps.pool.services import node_token_issue
from apps.scheduling.adapter import schedule_cycle

from ..drive import Agent
from ..factories import spec

pytestmark = pytest.mark.django_db


def _node_client(name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=name)}")
    return client


@pytest.fixture
def upload(owner):
    return upload_create(owner=owner, name="frames.bin", fileobj=ContentFile(b"f" * 5000, name="frames.bin"))


@pytest.fixture
def blocked(owner, pool, upload):
    """Job A holds all of node-a's H100s; job B, which needs them with an input, waits reserved there."""
    running = job_submit(owner=owner, document=spec(compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}))
    schedule_cycle()
    waiting = job_submit(owner=owner, document=spec(
        compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "10m"},
        data=[{"source": upload.source, "target": "data/"}]))
    schedule_cycle()
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert (running.state, waiting.state) == ("rented", "queued")
    return running, waiting


def test_a_reserved_job_is_pre_staged_on_its_planned_node(blocked, pool, upload):
    _, waiting = blocked
    node_a, node_b = pool
    [row] = JobPrestage.objects.filter(job=waiting)
    assert row.node == node_a and row.state == "planned"
    offers = agent_work_for(node_a)["prestage"]
    assert offers == [{"job_id": waiting.pk, "data": waiting.spec["data"], "new": True,
                       "input_scope": {"owner": owner_scope(waiting.owner_id)}}]  # whose inputs (issue 23)
    assert agent_work_for(node_b)["prestage"] == []
    prestage_mark_offered(node_a, [waiting.pk])
    assert agent_work_for(node_a)["prestage"][0]["new"] is False
    # the planned node may fetch the upload before any lease exists; another node may not
    assert _node_client("node-a").get(f"/api/v1/agent/uploads/{upload.pk}/").status_code == 200
    assert _node_client("node-b").get(f"/api/v1/agent/uploads/{upload.pk}/").status_code == 404


def test_jobs_without_inputs_are_not_pre_staged(owner, pool):
    job_submit(owner=owner, document=spec(compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}))
    schedule_cycle()
    job_submit(owner=owner, document=spec(compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}))
    schedule_cycle()
    assert not JobPrestage.objects.exists()


def test_progress_reports_show_on_the_api_and_the_page(blocked, api, owner):
    _, waiting = blocked
    agent = _node_client("node-a")
    resp = agent.post("/api/v1/agent/prestage/", {"jobs": [
        {"job_id": waiting.pk, "state": "fetching", "bytes_done": 2000, "bytes_total": 5000}]}, format="json")
    assert resp.status_code == 200 and resp.json() == {"prestage": [waiting.pk]}
    staging = api.get(f"/api/v1/jobs/{waiting.pk}/").json()["staging"]
    assert staging == {"phase": "prestage", "bytes_done": 2000, "bytes_total": 5000, "rate_bytes_per_s": None,
                       "percent": 40, "nodes": ["node-a"], "state": "fetching", "message": ""}
    agent.post("/api/v1/agent/prestage/", {"jobs": [
        {"job_id": waiting.pk, "state": "done", "bytes_done": 5000, "bytes_total": 5000}]}, format="json")
    from django.test import Client

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "pre-staged on node-a" in page and "4.9\xa0KB of 4.9\xa0KB" in page


def test_a_report_for_another_node_or_job_changes_nothing(blocked):
    _, waiting = blocked
    resp = _node_client("node-b").post("/api/v1/agent/prestage/", {"jobs": [
        {"job_id": waiting.pk, "state": "done", "bytes_done": 1, "bytes_total": 1}]}, format="json")
    assert resp.status_code == 200 and resp.json() == {"prestage": []}
    assert JobPrestage.objects.get(job=waiting).state == "planned"
    bad = _node_client("node-a").post("/api/v1/agent/prestage/", {"jobs": [{"job_id": "x"}]}, format="json")
    assert bad.status_code == 400 and "jobs" in bad.json()


def test_the_rows_go_when_the_job_is_cancelled(blocked):
    running, waiting = blocked
    job_cancel(job=waiting)
    schedule_cycle()
    assert not JobPrestage.objects.exists()


def test_the_rows_go_once_the_job_is_rented(blocked):
    running, waiting = blocked
    Agent(running).run()  # released: its GPUs free, the release's cycle rents the waiting job
    schedule_cycle()
    waiting.refresh_from_db()
    assert waiting.state == "rented" and not JobPrestage.objects.exists()
    assert agent_work_for(Node.objects.get(name="node-a"))["prestage"] == []


def test_the_assignment_names_the_inputs_owner_as_the_pre_stage_did(blocked, owner, stranger):
    """Issue 23: the agent keys its cache by the same identity at pre-stage and at staging, and another
    account's job gets another scope (the tenant id is a keyed hash: no account id reaches the node)."""
    running, waiting = blocked
    node_a = Node.objects.get(name="node-a")
    offered = agent_work_for(node_a)["prestage"][0]["input_scope"]
    Agent(running).run()
    schedule_cycle()
    [assignment] = [a for a in agent_work_for(node_a)["assignments"] if a["job_id"] == waiting.pk]
    assert assignment["input_scope"] == offered == {"owner": owner_scope(owner.pk)}
    assert owner_scope(stranger.pk) != owner_scope(owner.pk)
    assert re.fullmatch(r"ow1-[0-9a-f]{32}", offered["owner"]) and "user" not in offered["owner"]


def _rented_with_input(owner, pool, upload) -> tuple[Job, Lease]:
    job = job_submit(owner=owner, document=spec(data=[{"source": upload.source}]))
    schedule_cycle()
    lease = Lease.objects.get(job=job)
    return job, lease


def _say(lease, seq, type_, **extra):
    agent_report(node=lease.node, job_id=lease.job_id, report={"attempt": 1, "seq": seq, "type": type_, **extra})


def test_inputs_all_in_the_cache_bill_no_staging_seconds(owner, pool, upload):
    job, lease = _rented_with_input(owner, pool, upload)
    _say(lease, 1, "accepted")
    _say(lease, 2, "staging", bytes_done=5000, bytes_total=5000, bytes_fetched=0, bytes_cached=5000)
    _say(lease, 3, "running", pid=1)
    lease.refresh_from_db()
    assert lease.staging_seconds == 0


def test_downloads_on_the_meter_are_counted_as_staging_seconds(frozen_clock, owner, pool, upload):
    job, lease = _rented_with_input(owner, pool, upload)
    _say(lease, 1, "accepted")
    _say(lease, 2, "staging", bytes_done=1000, bytes_total=5000, bytes_fetched=1000, bytes_cached=0)
    lease.refresh_from_db()
    assert lease.staging_seconds == 1  # at least one second, even at the accept's instant
    frozen_clock.advance(7)
    _say(lease, 3, "staging", bytes_done=5000, bytes_total=5000, bytes_fetched=5000, bytes_cached=0)
    job.refresh_from_db()
    assert job.staging_rate_bps == 4000 / 7  # bytes per second since the last staging report
    progress = staging_progress(job)
    assert progress.phase == "staging" and progress.percent == 100
    frozen_clock.advance(1.5)
    _say(lease, 4, "running", pid=1)
    lease.refresh_from_db()
    assert lease.staging_seconds == 9  # 8.5 s from the accept, whole seconds up


def test_a_queued_jobs_image_is_pre_pulled_where_planned_and_a_node_holding_it_is_preferred(owner, pool):
    """Issue 23 item 4: an image pulled without a login goes into the pre-stage offer of the planned
    node (meter off); one with a login (a secret) is not offered, it is pulled after the rent; and
    among equal nodes the one whose store holds the image is chosen."""
    import json

    from django.utils import timezone
    from e31_protocol.inputs import image_identity

    from apps.scheduling.node_cache import node_cache_report
    from apps.secrets.services import secret_set

    from ..factories import node_with_gpus

    Node.objects.update(runtimes=["podman"])
    image = "registry.example/team/train:1"
    job_submit(owner=owner, document=spec(compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}))
    schedule_cycle()  # node-a's four H100s are taken
    public = job_submit(owner=owner, document=spec(
        work={"command": "python train.py", "kind": "training", "image": image},
        compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "10m"}))
    secret_set(owner=owner, name="REG", value=json.dumps({"username": "u", "password": "p"}), now=timezone.now())
    private = job_submit(owner=owner, document=spec(
        work={"command": "python train.py", "kind": "training", "image": image, "image_credentials": "REG"},
        compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "10m"}))
    schedule_cycle()
    node_a = Node.objects.get(name="node-a")
    offers = agent_work_for(node_a)["prestage"]
    assert [(o["job_id"], o.get("image")) for o in offers] == [(public.pk, image)]
    assert offers[0]["data"] == [] and private.pk not in {o["job_id"] for o in offers}

    # Two free nodes alike; the one reporting the image in its store gets the job.
    node_with_gpus("node-c", count=1, model="L40S-48GB", memory_mb=46068, runtimes=["podman"])
    holding = node_with_gpus("node-d", count=1, model="L40S-48GB", memory_mb=46068, runtimes=["podman"])
    node_cache_report(node_id=holding.pk, inputs=[image_identity(image)])
    job = job_submit(owner=owner, document=spec(work={"command": "x", "kind": "other", "image": image},
                                                compute={"gpus": 1, "gpu_model": ["L40S"], "time_limit": "5m"}))
    schedule_cycle()
    assert Lease.objects.get(job=job).node == holding
