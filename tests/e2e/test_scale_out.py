"""The scale-out shape (issue 15 item 4): two web processes and two workers on one PostgreSQL and
Redis, each agent talking to a different web process; every job's bundle downloads, byte for
byte, from either web process.
"""
from __future__ import annotations

import hashlib

import pytest
from django.conf import settings

from apps.metering.models import Lease
from apps.pool.models import Gpu
from devstack import LocalStack
from tests.e2e.conftest import E2E_REDIS_DB, database_url
from tests.e2e.test_five_steps import EXAMPLES, check_bundle, check_meter, submit_api, token_client, wait_released
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def scaled(transactional_db, tmp_path):
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}"
    live = LocalStack(database_url=database_url(), redis_url=redis_url, var_dir=tmp_path / "var",
                      agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB")], web=2, workers=2,
                      split_workers=True, spread_agents=True, env={"E31_GRACE_S": "2"})
    live.start()
    try:
        live.wait_for(lambda: Gpu.objects.count() == 6, timeout=30)
        yield live
    finally:
        live.stop()


def test_four_examples_on_two_webs_and_two_workers(scaled):
    user = UserFactory(username="scale")
    first, second = (token_client(url, user) for url in scaled.urls)
    assert scaled.urls[0] != scaled.urls[1]
    ids = [pk for i, name in enumerate(EXAMPLES) for pk in submit_api((first, second)[i % 2], name)]
    jobs = wait_released(first, ids, timeout=180)
    nodes = set()
    for job in jobs.values():
        assert job["outcome"] == "succeeded", (job["name"], job["status_message"])
        check_meter(job["id"])
        digests = set()
        for client in (first, second):
            check_bundle(client, job)
            with client.stream("GET", f"/api/v1/jobs/{job['id']}/bundle/") as resp:
                digests.add(hashlib.sha256(b"".join(resp.iter_bytes())).hexdigest())
        assert digests == {job["bundle"]["sha256"]}
        nodes.update(Lease.objects.filter(job_id=job["id"]).values_list("node__name", flat=True))
    assert nodes == {"node-a", "node-b"}  # each agent, through its own web process, ran work
