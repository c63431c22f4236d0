"""End to end, secrets (issue 23): a secret set with ``e31 secret set`` reaches the job's environment, its
value shows as ``[secret HF_TOKEN]`` in the job's log and nowhere else a user or operator can reach; URLs
with credentials in them are shown as ``***``; a private bucket is read with ``data[0].credentials``.

Real uvicorn, Celery worker and agents (tests/e2e/conftest.py) over the test database; the CLI as its
installed console script; a real S3-compatible server (moto, tests/s3.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from apps.notices.models import NoticePreference
from apps.secrets.models import Secret
from tests.factories import UserFactory

from .test_five_steps import browser_client, token_client, wait_released

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

HF = "hf_e2eLiveSecretValue_7Q2"
S3_SECRET = "s3-e2e-SecretAccessKey-99"
URL_PASSWORD = "pa55w0rd-e2e-XYZ"
SIGNATURE = "deadbeefe2eSIG0123"
CREDENTIAL = "AKIAE2EQUERYCRED"
VALUES = (HF, S3_SECRET, URL_PASSWORD, SIGNATURE, CREDENTIAL)
E31 = str(Path(sys.executable).with_name("e31"))

try:
    import s3fs  # noqa: F401  (the agent's `cloud` extra: s3:// inputs)
    HAVE_S3FS = True
except ImportError:
    HAVE_S3FS = False


def _found(text: str) -> list[str]:
    return [v for v in VALUES if v in text]


def _e31(stack, token: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E31_")}
    env.update({"E31_URL": stack.url, "E31_TOKEN": token, "E31_CONFIG_DIR": str(stack.var_dir / "cli")})
    return subprocess.run([E31, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)


def test_secret_values_show_nowhere_but_as_a_name_in_the_log(s3_endpoint, stack):  # s3 first: its agents may read it
    from apps.tokens.services import token_issue

    user = UserFactory(username="e2e-secrets", email="e2e-secrets@example.com")
    NoticePreference.objects.update_or_create(owner=user, defaults={"email_on_release": True})
    UserFactory(username="e2e-root", is_staff=True, is_superuser=True)
    token = token_issue(user=user)
    api = token_client(stack.url, user)

    # the CLI reads the value from stdin: never on a command line
    set_ = _e31(stack, token, "secret", "set", "HF_TOKEN", stdin=HF + "\n")
    assert set_.returncode == 0, set_.stderr
    listed = _e31(stack, token, "secret", "ls")
    assert listed.returncode == 0 and "HF_TOKEN" in listed.stdout and not _found(listed.stdout + set_.stdout)

    echo = {"name": "echo-token", "work": {"command": 'echo "token: $HF_TOKEN"; echo "done"', "secrets": ["HF_TOKEN"]},
            "compute": {"gpus": 1, "time_limit": "2m"}}
    urls = {"name": "url-creds", "work": {"command": "true"}, "compute": {"gpus": 1, "time_limit": "2m"}, "data": [
        {"source": f"https://alice:{URL_PASSWORD}@data.example.invalid/set.tar", "target": "a/"},
        {"source": f"https://bucket.example.invalid/a.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                   f"{CREDENTIAL}%2F20250101&X-Amz-Signature={SIGNATURE}&X-Amz-Expires=300", "target": "b/"}]}
    ids = {name: api.post("/api/v1/jobs/", json=doc) for name, doc in (("echo", echo), ("urls", urls))}
    payload = b"private rows\n" * 1000
    if HAVE_S3FS:  # data[0].credentials: the owner's storage options, for that source only
        bucket = f"e31-e2e-{uuid.uuid4().hex[:10]}"
        s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="owner-key", aws_secret_access_key=S3_SECRET)
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="data.bin", Body=payload)
        creds = json.dumps({"key": "owner-key", "secret": S3_SECRET, "endpoint_url": s3_endpoint})
        assert api.post("/api/v1/secrets/", json={"name": "MY_BUCKET", "value": creds}).status_code == 201
        private = {"name": "private-read", "work": {"command": "sha256sum in/data.bin > sum.txt"},
                   "data": [{"source": f"s3://{bucket}/data.bin", "target": "in/", "credentials": "MY_BUCKET"}],
                   "compute": {"gpus": 1, "time_limit": "2m"}, "output": {"paths": ["sum.txt"]}}
        ids["s3"] = api.post("/api/v1/jobs/", json=private)
    assert all(r.status_code == 201 for r in ids.values()), {k: r.text for k, r in ids.items()}
    ids = {name: r.json()["id"] for name, r in ids.items()}
    jobs = wait_released(api, list(ids.values()), timeout=90)
    rerun = api.post(f"/api/v1/jobs/{ids['echo']}/rerun/")
    assert rerun.status_code == 201 and rerun.json()["spec"]["work"]["secrets"] == ["HF_TOKEN"]
    jobs.update(wait_released(api, [rerun.json()["id"]], timeout=60))

    echo_job, url_job = jobs[ids["echo"]], jobs[ids["urls"]]
    assert echo_job["outcome"] == "succeeded", echo_job
    assert url_job["outcome"] == "failed" and url_job["end_reason"] == "staging_failed"
    log = api.get(f"/api/v1/jobs/{ids['echo']}/logs/").text
    assert "token: [secret HF_TOKEN]" in log and "done" in log
    if HAVE_S3FS:
        s3_job = jobs[ids["s3"]]
        assert s3_job["outcome"] == "succeeded", s3_job
        files = api.get(f"/api/v1/jobs/{ids['s3']}/files/sum.txt").text
        assert hashlib.sha256(payload).hexdigest() in files

    # every surface a user or operator reaches: zero hits
    surfaces: dict[str, str] = {"cli": listed.stdout + set_.stdout + set_.stderr, "rerun": rerun.text}
    browser = browser_client(stack.url, "e2e-secrets")
    root = browser_client(stack.url, "e2e-root")
    for job_id in jobs:
        for path in ("", "events/", "logs/"):
            surfaces[f"api {job_id} {path}"] = api.get(f"/api/v1/jobs/{job_id}/{path}").text
        for path in (f"/jobs/{job_id}/", f"/jobs/{job_id}/log/", f"/jobs/new/?from={job_id}"):
            surfaces[path] = browser.get(path).text
        surfaces[f"admin job {job_id}"] = root.get(f"/admin/jobs/job/{job_id}/change/").text
    surfaces["api jobs"] = api.get("/api/v1/jobs/").text
    surfaces["api secrets"] = api.get("/api/v1/secrets/").text
    surfaces["secrets page"] = browser.get("/account/secrets/").text
    surfaces["admin secrets"] = root.get("/admin/secrets/secret/").text
    for secret in Secret.objects.all():
        surfaces[f"admin secret {secret.name}"] = root.get(f"/admin/secrets/secret/{secret.pk}/change/").text
    surfaces["admin events"] = root.get("/admin/jobs/jobevent/").text
    assert "HF_TOKEN" in surfaces[f"/jobs/{ids['echo']}/"]  # the name is shown
    assert "https://***@data.example.invalid" in surfaces[f"api {ids['urls']} "]
    assert "https://***@data.example.invalid" in surfaces[f"api {ids['urls']} events/"]  # the staging error
    hits = {where: _found(text) for where, text in surfaces.items() if _found(text)}
    assert not hits, hits

    # the stack's var dir: web, worker and agent logs (e-mails go to the console there), uploads,
    # bundles, and each agent's work dir (state, spool, logs, cache)
    stack.stop()
    assert any(p.name.startswith(("web", "worker")) for p in stack.var_dir.glob("*.log"))
    mails = "".join(p.read_text(errors="replace") for p in stack.var_dir.glob("*.log"))
    assert "To: e2e-secrets@example.com" in mails  # the release e-mails were printed (console backend)
    for path in stack.var_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found = [v for v in VALUES if v.encode() in data]
            assert not found, (path, found)
