"""End to end with the files in an S3-compatible store (issue 15 item 1): real uvicorn, Celery worker and
agents, ``E31_STORAGE_URL`` pointed at moto's server (tests/s3.py). The four examples run through the
API: their inputs go to the store, agents fetch them from signed URLs, upload their bundles straight
to the store, the side worker verifies them there, and downloads are redirects the store serves."""
from __future__ import annotations

import uuid

import boto3
import httpx
import pytest
from django.conf import settings

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
    for live in live_stack(tmp_path, redis_url=redis_url, env=env):
        yield live, store, bucket


def test_the_four_examples_run_with_files_in_the_object_store(s3_stack):
    stack, store, bucket = s3_stack
    api = token_client(stack.url, UserFactory(username="e2e-s3"))
    ids = [pk for name in EXAMPLES for pk in submit_api(api, name)]
    jobs = wait_released(api, ids, timeout=300)
    follow = httpx.Client(base_url=stack.url, headers=api.headers, timeout=30, follow_redirects=True)
    for job in jobs.values():
        assert job["outcome"] == "succeeded", (job["name"], job["status_message"],
                                               api.get(f"/api/v1/jobs/{job['id']}/logs/").text[-2000:])
        redirect = api.get(f"/api/v1/jobs/{job['id']}/bundle/")
        assert redirect.status_code == 302 and redirect.headers["location"].startswith(str(store.meta.endpoint_url))
        check_bundle(follow, job)
        check_meter(job["id"])
    keys = [o["Key"] for o in store.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert len([k for k in keys if k.startswith("bundles/") and k.endswith("/bundle.tar")]) == len(ids)
    assert [k for k in keys if k.startswith("uploads/")]  # the examples' inputs
    assert not [k for k in keys if k.startswith("staging/")]
    assert not store.list_multipart_uploads(Bucket=bucket).get("Uploads")
