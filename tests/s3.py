"""A real S3-compatible server for the tests: moto's server mode (``moto_server``, from the ``moto[server]``
dev dependency), started once per test session on a free port unless ``E31_TEST_S3_ENDPOINT`` names one
already running. Never a mock object: boto3, django-storages and the agent talk HTTP to it
(docs/deploy.md "Storage", why moto).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "e31-test", "AWS_SECRET_ACCESS_KEY": "e31-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_command(port: int) -> list[str]:
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    return [exe, "-H", "127.0.0.1", "-p", str(port)]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of an S3-compatible server: ``E31_TEST_S3_ENDPOINT``, or a ``moto_server`` started
    here (stopped at the end of the session)."""
    given = os.environ.get("E31_TEST_S3_ENDPOINT")
    if given:
        yield given
        return
    port = _free_port()
    proc = subprocess.Popen(_moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                httpx.get(url + "/moto-api/", timeout=1.0)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise RuntimeError("moto_server exited at start") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("moto_server did not answer in 30 s")
        # Agents started from here on may read it with a tenant's credentials (endpoint_url): a loopback
        # endpoint is refused unless the operator allows it (e31_agent.credentials.endpoint_check).
        os.environ["E31_DATA_ENDPOINTS_ALLOWED"] = f"127.0.0.1:{port}"
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def storage_options(endpoint: str, bucket: str) -> dict:
    """``STORAGES["default"]`` as ``E31_STORAGE_URL=s3://<bucket>?endpoint_url=<endpoint>`` gives it."""
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
        "bucket_name": bucket, "location": "", "endpoint_url": endpoint, "region_name": "us-east-1",
        "addressing_style": None, "signature_version": "s3v4", "querystring_expire": 300, "file_overwrite": True}}


@pytest.fixture
def s3_storage(s3_endpoint, settings, monkeypatch) -> Iterator[str]:
    """The default storage is a fresh bucket of the S3-compatible server for this test; yields its name."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    bucket = f"e31-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    settings.STORAGES = {**settings.STORAGES, "default": storage_options(s3_endpoint, bucket)}
    yield bucket
