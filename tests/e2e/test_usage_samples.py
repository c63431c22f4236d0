"""Usage charts end to end: a real agent (simulated GPUs) samples a running job's process tree
and posts the samples; the owner reads them from ``metrics/`` and the job page, a stranger
gets 404."""
from __future__ import annotations

import pytest
from django.conf import settings

from apps.pool.models import Gpu
from devstack import LocalStack
from tests.factories import UserFactory

from .conftest import E2E_REDIS_DB, database_url, node_token
from .test_five_steps import browser_client, token_client, wait_released

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BUSY = ("end=$(( $(date +%s) + 5 )); while [ $(date +%s) -lt $end ]; do :; done; echo done")


@pytest.fixture
def sampled_stack(transactional_db, tmp_path):
    """One node (1 x H100, simulated) whose agent samples every half second."""
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}"
    live = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp_path / "var",
                      agents=[("node-a", "1xH100-80GB")],
                      env={"E31_GRACE_S": "2", "E31_AGENT_SAMPLE_INTERVAL_S": "0.5"}, issue_token=node_token)
    live.start()
    try:
        live.wait_for(lambda: Gpu.objects.count() == 1, timeout=30)
        yield live
    finally:
        live.stop()


def test_a_running_job_is_sampled_and_its_owner_sees_the_series(sampled_stack):
    user = UserFactory(username="sampled")
    nosy = token_client(sampled_stack.url, UserFactory(username="nosy"))
    api = token_client(sampled_stack.url, user)
    resp = api.post("/api/v1/jobs/", json={"name": "busy", "work": {"command": BUSY},
                                           "compute": {"gpus": 1, "time_limit": "5m"}})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    job = wait_released(api, [job_id])[job_id]
    assert job["outcome"] == "succeeded", job["status_message"]
    data = api.get(f"/api/v1/jobs/{job_id}/metrics/").json()
    [node] = data["nodes"]
    assert node["gpu_source"] == "simulated" and node["gpus"] == []  # no made-up GPU figures
    assert len(node["at_epoch_s"]) >= 3, node
    assert node["at_epoch_s"] == sorted(node["at_epoch_s"])
    assert max(node["cpu_percent"]) > 0 and min(node["rss_bytes"]) > 0
    page = browser_client(sampled_stack.url, "sampled").get(f"/jobs/{job_id}/").text
    assert "Peak CPU" in page and "simulated" in page
    assert nosy.get(f"/api/v1/jobs/{job_id}/metrics/").status_code == 404
