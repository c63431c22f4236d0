"""A node whose agent runs jobs without the tenant sandbox (--unsafe-no-sandbox) is marked."""
import pytest
from rest_framework.test import APIClient

from apps.pool.models import Node
from apps.pool.services import node_token_issue
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

INVENTORY = {"hostname": "h", "gpus": [{"index": 0, "uuid": "GPU-z", "model": "L4-24GB", "memory_mb": 23034}],
             "cpus": 8, "memory_bytes": 32 * 10**9, "simulated": True}


def register(name: str, **extra) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=name)}")
    assert client.post("/api/v1/agent/register/", {**INVENTORY, **extra}, format="json").status_code == 200


def test_registration_records_whether_the_node_sandboxes_its_jobs_and_staff_see_it(pool):
    register("sealed", sandboxed=True)
    register("open", sandboxed=False)
    register("old")  # an agent too old to say is not taken to sandbox
    assert dict(Node.objects.filter(name__in=["sealed", "open", "old"]).values_list("name", "sandboxed")) == {
        "sealed": True, "open": False, "old": False}
    staff = UserFactory(username="ops2", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_authenticate(staff)
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes/").json()}
    assert (nodes["sealed"]["sandboxed"], nodes["open"]["sandboxed"]) == (True, False)
    client.force_login(staff)
    page = client.get("/pool/").content.decode()
    row = page[page.index(">open"):][:600]
    assert "unsandboxed" in row
    assert "unsandboxed" not in page[page.index(">sealed"):][:300]


def test_a_bad_sandboxed_value_is_refused_naming_the_field(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='n1')}")
    resp = client.post("/api/v1/agent/register/", {**INVENTORY, "sandboxed": "maybe"}, format="json")
    assert resp.status_code == 400 and "sandboxed" in resp.json()
