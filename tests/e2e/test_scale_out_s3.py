"""End to end in the scale-out shape with the files in an S3-compatible store (issue 15 items 1 and 4).

Two uvicorn web processes and two Celery workers per queue on one PostgreSQL and Redis; node-a's
agent talks to the first web process, node-b's to the second; ``E31_STORAGE_URL`` points at moto's
server (tests/s3.py). The four examples go in through both web processes: their inputs go to the
store, agents fetch them from signed URLs, upload their bundles straight to the store, a side worker
verifies them there, and every bundle downloads, byte for byte, through either web process (a
redirect the store serves)."""
from __future__ import annotations

import uuid

import boto3
import httpx
import pytest
from django.conf import settings

from apps.metering.models import Lease
from tests.factories import UserFactory
from tests.s3 import CREDENTIALS

from .conftest import E2E_REDIS_DB, live_stack
from .test_five_steps import EXAMPLES, check_bundle, check_meter, submit_api, token_client, wait_released

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]


@pytest.fixture
def s3_stack(transactional_db, tmp_path, s3_endpoint):
    bucket = f"e31-e2e-{uuid.uuid4().hex[:12]}"
    store = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                         aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    store.create_bucket(Bucket=bucket)
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}" if settings.REDIS_URL else ""
    env = {**CREDENTIALS, "E31_STORAGE_URL": f"s3://{bucket}?endpoint_url={s3_endpoint}&region=us-east-1"}
    for live in live_stack(tmp_path, redis_url=redis_url, env=env, web=2, workers=2, split_workers=True,
                           spread_agents=True):
        yield live, store, bucket


def test_the_four_examples_run_on_two_webs_and_two_workers_with_files_in_the_object_store(s3_stack):
    stack, store, bucket = s3_stack
    user = UserFactory(username="e2e-s3")
    apis = [token_client(url, user) for url in stack.urls]
    assert len(set(stack.urls)) == 2
    ids = [pk for i, name in enumerate(EXAMPLES) for pk in submit_api(apis[i % 2], name)]
    api = apis[0]
    jobs = wait_released(api, ids, timeout=300)
    for job in jobs.values():
        assert job["outcome"] == "succeeded", (job["name"], job["status_message"],
                                               api.get(f"/api/v1/jobs/{job['id']}/logs/").text[-2000:])
        for web in apis:
            redirect = web.get(f"/api/v1/jobs/{job['id']}/bundle/")
            assert redirect.status_code == 302
            assert redirect.headers["location"].startswith(str(store.meta.endpoint_url))
            check_bundle(httpx.Client(base_url=str(web.base_url), headers=web.headers, timeout=30,
                                      follow_redirects=True), job)
        check_meter(job["id"])
    # each agent, through its own web process, ran work
    assert set(Lease.objects.filter(job_id__in=ids).values_list("node__name", flat=True)) == {"node-a", "node-b"}
    keys = [o["Key"] for o in store.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert len([k for k in keys if k.startswith("bundles/") and k.endswith("/bundle.tar")]) == len(ids)
    assert [k for k in keys if k.startswith("uploads/")]  # the examples' inputs
    assert not [k for k in keys if k.startswith("staging/")]
    assert not store.list_multipart_uploads(Bucket=bucket).get("Uploads")
