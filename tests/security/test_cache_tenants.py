"""Issue 23 finding 1 replayed on real processes: the node cache serves an input only to a job entitled
to its source (SPEC §6, "Inputs"; docs/security.md).

alice's job on node-a reads her upload, checksum H. bob's job, on the same GPU model (so the same node),
names H with a source of his own: before, it started with alice's 1,000,000 bytes in ``x.bin``; now it
fetches its own source and fails staging on it, naming ``data[0]``, and never runs. alice's second job
stages from the cache; two users reading the same public file anonymously share one entry.

Real uvicorn, Celery worker and agents (tests/e2e/conftest.py's stack, with a ``file://`` root).
"""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time

import httpx
import pytest
from django.conf import settings

from apps.agent_api.models import AgentReport
from apps.jobs.models import Job
from apps.scheduling.models import NodeCache
from tests.e2e.conftest import E2E_REDIS_DB, live_stack
from tests.e2e.test_five_steps import token_client, wait_released
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
SECRET_BYTES = 1_000_000
ON_NODE_A = {"gpus": 1, "gpu_model": ["H100"], "time_limit": "1m"}  # only node-a has H100s


@pytest.fixture
def public_dir(tmp_path):
    path = tmp_path / "public"
    path.mkdir()
    return path


@pytest.fixture
def stack(transactional_db, tmp_path, public_dir):
    """The e2e stack, its agents allowed ``file://`` inputs under ``public_dir`` (a file every tenant
    may read: anonymous, like a public URL)."""
    redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}" if settings.REDIS_URL else ""
    roots = {"E31_AGENT_FILE_ROOTS": str(public_dir), "E31_FILE_ROOTS": str(public_dir)}  # agents; submit
    yield from live_stack(tmp_path, redis_url=redis_url, env=roots)


def _submit(api: httpx.Client, doc: dict) -> int:
    resp = api.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _staging_reports(job_id: int) -> list[dict]:
    return [r.payload for r in AgentReport.objects.filter(job_id=job_id, type="staging").order_by("seq")]


def _out(api: httpx.Client, job_id: int) -> str:
    resp = api.get(f"/api/v1/jobs/{job_id}/bundle/")
    assert resp.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        return tar.extractfile("out.txt").read().decode()


def _node_cache_reported(timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = NodeCache.objects.filter(node__name="node-a").first()
        # the input cache's identities; the image store's (img1-, issue 23) are reported beside them
        inputs = [k for k in row.inputs if not k.startswith("img1-")] if row is not None else []
        if inputs:
            return inputs
        time.sleep(0.3)
    raise AssertionError("node-a reported no cache contents")


def test_a_digest_does_not_unlock_another_tenants_upload_and_the_owner_still_reuses_it(stack):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    alice_api, bob_api = token_client(stack.url, alice), token_client(stack.url, bob)
    secret = os.urandom(SECRET_BYTES)
    digest = hashlib.sha256(secret).hexdigest()
    up = alice_api.post("/api/v1/uploads/", files={"file": ("alice-secret.bin", secret)})
    assert up.status_code == 201, up.text
    reader = {"name": "alice", "work": {"command": "sha256sum in/alice-secret.bin > out.txt"}, "compute": ON_NODE_A,
              "data": [{"source": up.json()["source"], "sha256": digest, "target": "in/"}],
              "output": {"paths": ["out.txt"]}}
    first = _submit(alice_api, reader)
    job = wait_released(alice_api, [first], timeout=60)[first]
    assert job["outcome"] == "succeeded", job["status_message"]
    assert _out(alice_api, first).split()[0] == digest

    # bob, same GPU model (node-a), names alice's digest with a source of his own
    probe = {"name": "bob", "work": {"command": "sha256sum x.bin; head -c 64 x.bin | od -c"}, "compute": ON_NODE_A,
             "data": [{"source": "https://example.invalid/nothing.bin", "sha256": digest, "target": "x.bin"}]}
    second = _submit(bob_api, probe)
    job = wait_released(bob_api, [second], timeout=60)[second]
    assert job["outcome"] != "succeeded" and job["end_reason"] == "staging_failed", job
    events = bob_api.get(f"/api/v1/jobs/{second}/events/").json()
    why = next(e["detail"] for e in events if e["detail"].startswith("staging failed"))
    assert "data[0]" in why and "example.invalid/nothing.bin" in why, why
    assert Job.objects.get(pk=second).run_started_at is None  # his command never ran
    assert digest not in bob_api.get(f"/api/v1/jobs/{second}/logs/").text
    assert all(r.get("bytes_cached", 0) == 0 for r in _staging_reports(second))  # a miss, as on an empty cache

    # what node-a tells the server names no digest, source or account: placement leaks none either
    reported = _node_cache_reported()
    assert reported and all(k.startswith("in1-") for k in reported), reported
    assert not any(digest in k or up.json()["source"] in k for k in reported)

    # alice's own second job is served from the cache: nothing downloaded at rent
    again = _submit(alice_api, {**reader, "name": "alice-again"})
    job = wait_released(alice_api, [again], timeout=60)[again]
    assert job["outcome"] == "succeeded", job["status_message"]
    assert _out(alice_api, again).split()[0] == digest
    last = _staging_reports(again)[-1]
    assert (last["bytes_fetched"], last["bytes_cached"]) == (0, SECRET_BYTES)


def test_two_tenants_share_a_public_input_read_anonymously(stack, public_dir):
    """SPEC §6: an input read with no credentials, from the same canonical source, is one entry for
    every tenant (either could fetch it from this node): the second job downloads nothing."""
    payload = os.urandom(300_000)
    (public_dir / "weights.bin").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    doc = {"work": {"command": "sha256sum in/weights.bin > out.txt"}, "compute": ON_NODE_A,
           "data": [{"source": (public_dir / "weights.bin").as_uri(), "target": "in/"}],
           "output": {"paths": ["out.txt"]}}
    carol, dave = UserFactory(username="carol"), UserFactory(username="dave")
    carol_api, dave_api = token_client(stack.url, carol), token_client(stack.url, dave)
    first = _submit(carol_api, {**doc, "name": "carol"})
    assert wait_released(carol_api, [first], timeout=60)[first]["outcome"] == "succeeded"
    second = _submit(dave_api, {**doc, "name": "dave"})
    job = wait_released(dave_api, [second], timeout=60)[second]
    assert job["outcome"] == "succeeded", job["status_message"]
    assert _out(dave_api, second).split()[0] == digest
    assert _staging_reports(first)[-1]["bytes_fetched"] == len(payload)
    last = _staging_reports(second)[-1]
    assert (last["bytes_fetched"], last["bytes_cached"]) == (0, len(payload))
