"""Issue 26 item 3: a GPU that is not clean is quarantined, not placed, named in the pending reason,
the API and /metrics, and comes back by itself on a clean heartbeat or when an operator lifts it."""
import pytest
from rest_framework.test import APIClient

from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease
from apps.pool.models import Gpu
from apps.pool.services import node_heartbeat
from apps.scheduling.adapter import schedule_cycle

from ..factories import UserFactory, node_with_gpus, spec

pytestmark = pytest.mark.django_db


def beat(node, now, **gpu):
    node_heartbeat(node=node, now=now, health={"source": "nvml", "gpus": [
        {"uuid": "GPU-q", "index": 0, "memory_used_mb": 3, "ecc_uncorrected": 0, **gpu}]})


@pytest.fixture
def node(db):
    return node_with_gpus("node-q", count=1)


def test_dirty_memory_quarantines_the_gpu_and_a_clean_heartbeat_brings_it_back(frozen_clock, owner, node):
    beat(node, frozen_clock.now(), memory_used_mb=30000)
    gpu = Gpu.objects.get(node=node)
    assert gpu.quarantine_reason == "30,000 MiB of memory in use with no lease"
    assert gpu.quarantined_at == frozen_clock.now()

    job = job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": "1m"}))
    assert schedule_cycle(now=frozen_clock.now())["placed"] == 0
    job.refresh_from_db()
    assert job.state == "queued" and not Lease.objects.filter(job=job).exists()
    assert job.pending_reason == ("waiting for GPUs held back as unclean (quarantined): "
                                  "node-q GPU 0: 30,000 MiB of memory in use with no lease")

    frozen_clock.advance(10)
    beat(node, frozen_clock.now())  # clean: memory back to idle
    gpu.refresh_from_db()
    assert gpu.quarantined_at is None and gpu.quarantine_reason == ""
    assert schedule_cycle(now=frozen_clock.now())["placed"] == 1
    assert Job.objects.get(pk=job.pk).state == "rented"


def test_ecc_errors_quarantine_the_gpu_and_the_api_and_metrics_say_why(
        frozen_clock, node, client, settings):
    beat(node, frozen_clock.now(), ecc_uncorrected=2)
    assert Gpu.objects.get(node=node).quarantine_reason == "2 uncorrected ECC errors"

    staff = UserFactory(username="ops", is_staff=True, is_superuser=True)
    api = APIClient()
    api.force_authenticate(staff)
    [row] = [n for n in api.get("/api/v1/nodes/").json() if n["name"] == "node-q"]
    assert row["gpus"][0]["quarantine_reason"] == "2 uncorrected ECC errors"
    assert row["gpus"][0]["quarantined_at"]
    assert row["health"][0]["warning"].startswith("quarantined: 2 uncorrected ECC errors")

    settings.E31_METRICS_TOKEN = "t"
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    assert 'e31_gpus{model="H100-80GB",state="quarantined"} 1.0' in text
    assert 'e31_gpu_quarantined{gpu="0",node="node-q",reason="2 uncorrected ECC errors"} 1.0' in text


def test_an_operator_lifts_a_quarantine_in_the_admin(frozen_clock, node):
    beat(node, frozen_clock.now(), processes=1)
    gpu = Gpu.objects.get(node=node)
    assert gpu.quarantine_reason == "1 process running with no lease"
    staff = UserFactory(username="ops", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_login(staff)
    resp = client.post("/admin/pool/gpu/", {"action": "lift_quarantine", "_selected_action": [gpu.pk]})
    assert resp.status_code == 302
    gpu.refresh_from_db()
    assert gpu.quarantined_at is None
    frozen_clock.advance(10)
    beat(node, frozen_clock.now(), processes=1)  # still dirty: held back again
    gpu.refresh_from_db()
    assert gpu.quarantined_at == frozen_clock.now()
