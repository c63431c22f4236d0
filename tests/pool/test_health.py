"""GPU health: sent with every heartbeat, validated, kept on the node, shown to staff."""
import pytest
from rest_framework.test import APIClient

from apps.pool.models import Node
from apps.pool.services import node_token_issue
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HEALTH = {"source": "nvml", "gpus": [
    {"uuid": "GPU-b", "index": 1, "temperature_c": 91, "utilization_pct": 100, "memory_used_mb": 70000,
     "ecc_uncorrected": 2, "ecc_corrected": 5},
    {"uuid": "GPU-a", "index": 0, "temperature_c": 40, "utilization_pct": 3, "memory_used_mb": 10,
     "ecc_uncorrected": None, "ecc_corrected": None},
]}


@pytest.fixture
def agent(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='node-a')}")
    return client


def test_a_heartbeat_stores_the_gpu_health(agent):
    resp = agent.post("/api/v1/agent/heartbeat/", {"running": [], "health": HEALTH}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "up"
    node = Node.objects.get(name="node-a")
    assert node.health["source"] == "nvml" and node.health["at"]
    rows = node.gpu_health()
    assert [r["uuid"] for r in rows] == ["GPU-a", "GPU-b"]
    assert rows[0]["warning"] == ""
    assert rows[1]["warning"] == ("quarantined: 2 uncorrected ECC errors; 70,000 MiB of memory in use with no "
                                  "lease, hot (91 °C), 2 uncorrected ECC errors")  # held back (issue 26 item 3)


def test_bad_health_is_refused_naming_the_field(agent):
    bad = {"gpus": [{"uuid": "GPU-a", "index": 0, "utilization_pct": 250}]}
    resp = agent.post("/api/v1/agent/heartbeat/", {"health": bad}, format="json")
    assert resp.status_code == 400
    assert "utilization_pct" in str(resp.json())
    assert Node.objects.get(name="node-a").health == {}


def test_staff_see_nodes_with_health_in_the_api_admin_and_pool_page(agent, api):
    agent.post("/api/v1/agent/heartbeat/", {"health": HEALTH}, format="json")
    assert api.get("/api/v1/nodes/").status_code == 403  # not staff
    staff = UserFactory(username="ops", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_authenticate(staff)
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes/").json()}
    assert nodes["node-a"]["health_source"] == "nvml"
    assert [g["temperature_c"] for g in nodes["node-a"]["health"]] == [40, 91]
    assert len(nodes["node-a"]["gpus"]) == 4
    client.force_login(staff)
    node = Node.objects.get(name="node-a")
    page = client.get(f"/admin/pool/node/{node.pk}/change/").content.decode()
    assert "uncorrected ECC errors" in page and "GPU-b" in page
    page = client.get("/pool/").content.decode()
    assert "GPU health" in page and "hot (91 °C)" in page
