"""Fixtures of the agent-API tests: node-a's agent, registered, as an API client with its node token."""
import pytest
from rest_framework.test import APIClient

from apps.pool.services import node_token_issue


@pytest.fixture
def agent(pool):
    token = node_token_issue(name="node-a")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    inventory = {"hostname": "host-a", "gpus": [{"index": i, "uuid": f"GPU-a{i}", "model": "H100-80GB",
                                                  "memory_mb": 81559} for i in range(4)],
                 "cpus": 32, "memory_bytes": 256 * 10**9, "disk_bytes": 10**12, "simulated": True}
    assert client.post("/api/v1/agent/register/", inventory, format="json").status_code == 200
    return client
