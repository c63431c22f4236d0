"""Issue 14 item 5: pre-staging beyond the reserved job, and nodes reporting what their cache holds."""
from __future__ import annotations

import pytest
from django.core.files.base import ContentFile
from e31_protocol.inputs import input_identity
from rest_framework.test import APIClient

from apps.artifacts.services import upload_create
from apps.jobs.inputs import owner_scope, spec_input_identities
from apps.jobs.models import JobPrestage
from apps.jobs.services.submit import job_submit
from apps.pool.services import node_token_issue
from apps.scheduling.adapter import schedule_cycle
from apps.scheduling.models import NodeCache
from apps.scheduling.node_cache import cached_inputs

from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db

H100 = {"gpus": 4, "gpu_model": ["H100"]}


@pytest.fixture
def upload(owner):
    return upload_create(owner=owner, name="frames.bin", fileobj=ContentFile(b"f" * 5000, name="frames.bin"))


def _queue_of_three(owner, upload):
    """A runs on node-a (1 h); B (10 min, with the input) is reserved after it; C (with the input)
    waits behind B, not reserved: its likely start is about 70 minutes away."""
    job_submit(owner=owner, document=spec(compute={**H100, "time_limit": "1h"}))
    schedule_cycle()
    data = [{"source": upload.source, "target": "data/"}]
    b = job_submit(owner=owner, document=spec(compute={**H100, "time_limit": "10m"}, data=data))
    c = job_submit(owner=owner, document=spec(compute={**H100, "time_limit": "10m"}, data=data))
    schedule_cycle()
    b.refresh_from_db()
    c.refresh_from_db()
    assert (b.state, c.state) == ("queued", "queued")
    return b, c


def test_a_queued_job_whose_start_is_within_its_staging_time_is_pre_staged_on_its_planned_node(
        settings, owner, pool, upload):
    settings.E31_PRESTAGE_DEFAULT_RATE_BPS = 0.5  # 5000 bytes take 10,000 s: C's start (~4,200 s) is near
    b, c = _queue_of_three(owner, upload)
    node_a, _ = pool
    rows = {(p.job_id, p.node_id) for p in JobPrestage.objects.all()}
    assert rows == {(b.pk, node_a.pk), (c.pk, node_a.pk)}
    assert c.estimated_start_at is not None


def test_a_queued_job_whose_start_is_far_is_not_pre_staged(settings, owner, pool, upload):
    settings.E31_PRESTAGE_DEFAULT_RATE_BPS = 100e6  # 5000 bytes take 50 us: C's start is far
    b, c = _queue_of_three(owner, upload)
    assert set(JobPrestage.objects.values_list("job_id", flat=True)) == {b.pk}  # the reserved one only


def test_the_bound_per_node_holds(settings, owner, pool, upload):
    settings.E31_PRESTAGE_DEFAULT_RATE_BPS = 0.5
    settings.E31_PRESTAGE_PER_NODE = 1
    b, _c = _queue_of_three(owner, upload)
    assert list(JobPrestage.objects.values_list("job_id", flat=True)) == [b.pk]


def _node_client(name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=name)}")
    return client


def test_a_heartbeat_reports_the_cache_and_an_older_agent_without_it_still_works(pool):
    node_a, _ = pool
    agent = _node_client("node-a")
    resp = agent.post("/api/v1/agent/heartbeat/", {"running": []}, format="json")  # an older agent
    assert resp.status_code == 200 and "cancel" in resp.json()
    assert not NodeCache.objects.exists() and cached_inputs() == {}
    resp = agent.post("/api/v1/agent/heartbeat/", {"running": [], "cached_inputs": ["upload:x", "sha256-ab"]},
                      format="json")
    assert resp.status_code == 200
    assert cached_inputs() == {node_a.pk: frozenset({"upload:x", "sha256-ab"})}
    # the next beat of an older agent leaves the last report as it was
    assert agent.post("/api/v1/agent/heartbeat/", {"running": []}, format="json").status_code == 200
    assert cached_inputs() == {node_a.pk: frozenset({"upload:x", "sha256-ab"})}


def test_a_bad_cache_report_is_a_400_naming_the_field(pool):
    resp = _node_client("node-a").post("/api/v1/agent/heartbeat/", {"running": [], "cached_inputs": "nope"},
                                       format="json")
    assert resp.status_code == 400 and "cached_inputs" in resp.json()
    too_many = [f"k{i}" for i in range(1001)]
    resp = _node_client("node-a").post("/api/v1/agent/heartbeat/", {"cached_inputs": too_many}, format="json")
    assert resp.status_code == 400 and "cached_inputs" in resp.json()


def test_a_job_starts_on_the_node_whose_cache_holds_its_input(owner, upload):
    node_with_gpus("node-a", count=4)
    node_b = node_with_gpus("node-b", count=4)
    data = [{"source": upload.source, "target": "data/"}]
    held = input_identity(upload.source, owner=owner_scope(owner.pk))  # as the agent names its entry
    assert spec_input_identities(owner_id=owner.pk, data=data) == (held,)
    _node_client("node-b").post("/api/v1/agent/heartbeat/", {"running": [], "cached_inputs": [held]},
                                format="json")
    job = job_submit(owner=owner, document=spec(compute={"gpus": 2, "time_limit": "10m"}, data=data))
    schedule_cycle()
    lease = job.leases.get()
    assert lease.node_id == node_b.pk  # by name alone node-a would win the tie


def test_another_tenants_copy_of_an_input_draws_no_job_to_its_node(owner, stranger, upload):
    """Issue 23 item 1: affinity follows the cache's rule. node-b holds the owner's upload and reports it,
    also under its digest and source the way a v3 agent did; the stranger's job naming the same digest
    and a source of its own is placed as if no node held anything (node-a, by name)."""
    node_a = node_with_gpus("node-a", count=4)
    node_with_gpus("node-b", count=4)
    digest = "ab" * 32
    held = [input_identity(upload.source, owner=owner_scope(owner.pk)), f"sha256-{digest}", upload.source,
            "https://example.invalid/nothing.bin"]
    _node_client("node-b").post("/api/v1/agent/heartbeat/", {"running": [], "cached_inputs": held}, format="json")
    data = [{"source": "https://example.invalid/nothing.bin", "sha256": digest, "target": "x.bin"}]
    assert not set(spec_input_identities(owner_id=stranger.pk, data=data)) & set(held)
    job = job_submit(owner=stranger, document=spec(compute={"gpus": 2, "time_limit": "10m"}, data=data))
    schedule_cycle()
    assert job.leases.get().node_id == node_a.pk
