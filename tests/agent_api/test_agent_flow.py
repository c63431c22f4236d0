"""The five steps through the HTTP API, with the agent's side played by the test client."""
import hashlib
import io
import tarfile
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.jobs.models import Job, LogChunk
from apps.metering.models import Lease

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


def _bundle_bytes() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b'{"ok": true}'
        info = tarfile.TarInfo("out/metrics.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_it_runs_a_job_through_the_five_steps(api, agent):
    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 2, "time_limit": "10m", "gpu_model": ["H100"]}),
                    format="json")
    assert resp.status_code == 201, resp.json()
    job_id = resp.json()["id"]
    assert resp.json()["state"] == "queued"
    assert Job.objects.get(pk=job_id).state == "rented"  # the cycle ran on commit

    work = agent.get("/api/v1/agent/work/?wait=0").json()
    [assignment] = work["assignments"]
    assert assignment["job_id"] == job_id and len(assignment["gpus"]) == 2
    assert assignment["env"]["E31_NUM_NODES"] == "1"

    def report(seq, type_, **extra):
        return agent.post(f"/api/v1/agent/jobs/{job_id}/report/",
                          {"attempt": 1, "seq": seq, "type": type_, **extra}, format="json")

    assert report(1, "accepted").status_code == 200
    assert agent.get("/api/v1/agent/work/?wait=0").json()["assignments"] == []
    assert report(2, "running").status_code == 200
    log = agent.post(f"/api/v1/agent/jobs/{job_id}/log/?attempt=1&offset=0", b"hello\n",
                     content_type="application/octet-stream")
    assert log.json() == {"size": 6}
    # A repeated chunk and an overlapping one are stored once.
    agent.post(f"/api/v1/agent/jobs/{job_id}/log/?attempt=1&offset=0", b"hello\nworld\n",
               content_type="application/octet-stream")
    assert api.get(f"/api/v1/jobs/{job_id}/logs/?offset=0").content == b"hello\nworld\n"
    assert api.get(f"/api/v1/jobs/{job_id}/logs/?offset=6").content == b"world\n"

    assert report(3, "exited", exit_code=0, reason="exit").status_code == 200
    assert report(3, "exited", exit_code=0, reason="exit").json() == {"duplicate": True}
    assert Job.objects.get(pk=job_id).state == "output"

    data = _bundle_bytes()
    half = len(data) // 2
    url = f"/api/v1/agent/jobs/{job_id}/bundle/?attempt=1"
    bad = agent.put(url + "&offset=0", data[:half], content_type="application/octet-stream",
                    HTTP_X_CONTENT_SHA256="0" * 64)
    assert bad.status_code == 400
    for off, chunk in ((0, data[:half]), (half, data[half:])):
        r = agent.put(url + f"&offset={off}", chunk, content_type="application/octet-stream",
                      HTTP_X_CONTENT_SHA256=hashlib.sha256(chunk).hexdigest())
        assert r.status_code == 200, r.json()
    files = [{"path": "out/metrics.json", "size_bytes": 12, "sha256": hashlib.sha256(b'{"ok": true}').hexdigest()}]
    done = agent.post(f"/api/v1/agent/jobs/{job_id}/bundle/complete/?attempt=1",
                      {"size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "files": files},
                      format="json")
    assert done.status_code == 200, done.json()
    assert report(4, "finished").status_code == 200

    body = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert body["state"] == "released" and body["outcome"] == "succeeded"
    # released: the log is one storage object now, read the same
    assert Job.objects.get(pk=job_id).log_objects["1"]["name"] == f"logs/{job_id}/attempt-1.jsonl.gz"
    assert api.get(f"/api/v1/jobs/{job_id}/logs/?offset=6").content == b"world\n"
    lease = Lease.objects.get(job_id=job_id)
    assert lease.billed_seconds is not None and lease.released_at is not None
    assert Decimal(body["cost"]) == lease.cost
    assert body["bundle"]["files"] == files
    got = api.get(f"/api/v1/jobs/{job_id}/bundle/")
    assert b"".join(got.streaming_content) == data
    ranged = api.get(f"/api/v1/jobs/{job_id}/bundle/", HTTP_RANGE="bytes=0-9")
    assert ranged.status_code == 206 and b"".join(ranged.streaming_content) == data[:10]
    events = [e["to_state"] for e in api.get(f"/api/v1/jobs/{job_id}/events/").json()]
    assert [e for e in events if e] == ["queued", "rented", "running", "output", "released"]


def test_log_chunks_say_their_stream_and_time(api, agent):
    job_id = api.post("/api/v1/jobs/", spec(compute={"gpus": 2, "time_limit": "10m", "gpu_model": ["H100"]}),
                      format="json").json()["id"]
    assert agent.get("/api/v1/agent/work/?wait=0").json()["assignments"][0]["job_id"] == job_id
    for seq, type_ in ((1, "accepted"), (2, "running")):
        agent.post(f"/api/v1/agent/jobs/{job_id}/report/", {"attempt": 1, "seq": seq, "type": type_}, format="json")
    url = f"/api/v1/agent/jobs/{job_id}/log/?attempt=1"
    ok = agent.post(url + "&offset=0&stream=stderr&at=1764590400.250", b"boom\n",
                    content_type="application/octet-stream")
    assert ok.json() == {"size": 5}
    chunk = LogChunk.objects.get(job_id=job_id)
    assert chunk.stream == "stderr" and chunk.at == datetime(2025, 12, 1, 12, 0, 0, 250000, tzinfo=UTC)
    for bad in ("stream=stdin", "at=soon", "at=1e300"):
        resp = agent.post(url + f"&offset=5&{bad}", b"x", content_type="application/octet-stream")
        assert resp.status_code == 400, bad
    line = api.get(f"/api/v1/jobs/{job_id}/logs/?format=lines").json()["lines"][0]
    assert (line["stream"], line["text"], line["at"]) == ("stderr", "boom", "2025-12-01T12:00:00.250000+00:00")
