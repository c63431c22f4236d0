"""Agent protocol v3: the server acts on codes (``finished``'s ``code``, the ``stale_attempt`` answer),
never on the wording of a message; a v2 agent's fixed message prefixes are still read, for one version."""
import hashlib
import io
import tarfile

import pytest
from e31_protocol import LOST_OUTPUT, ErrorCode, FinishCode, finish_code, is_stale

from apps.jobs.models import Job

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)

FILE = b'{"ok": true}'
ON_NODE_A = {"gpus": 1, "time_limit": "10m", "gpu_model": ["H100"]}  # the test's agent is node-a's


def _bundle() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("out/metrics.json")
        info.size = len(FILE)
        tar.addfile(info, io.BytesIO(FILE))
    return buf.getvalue()


def _run_to_output(api, agent) -> int:
    """A job with declared outputs, run to ``exited`` 0 by the test's agent, its bundle delivered whole."""
    job_id = api.post("/api/v1/jobs/", spec(compute=ON_NODE_A), format="json").json()["id"]
    assert agent.get("/api/v1/agent/work/?wait=0").json()["assignments"][0]["job_id"] == job_id
    assert _report(agent, job_id, 1, "running").status_code == 200
    assert _report(agent, job_id, 2, "exited", exit_code=0, reason="exit").status_code == 200
    data = _bundle()
    put = agent.put(f"/api/v1/agent/jobs/{job_id}/bundle/?attempt=1&offset=0", data,
                    content_type="application/octet-stream", HTTP_X_CONTENT_SHA256=hashlib.sha256(data).hexdigest())
    assert put.status_code == 200
    files = [{"path": "out/metrics.json", "size_bytes": len(FILE), "sha256": hashlib.sha256(FILE).hexdigest()}]
    done = agent.post(f"/api/v1/agent/jobs/{job_id}/bundle/complete/?attempt=1",
                      {"size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "files": files},
                      format="json")
    assert done.status_code == 200, done.json()
    return job_id


def _report(agent, job_id: int, seq: int, type_: str, **extra):
    return agent.post(f"/api/v1/agent/jobs/{job_id}/report/", {"attempt": 1, "seq": seq, "type": type_, **extra},
                      format="json")


@pytest.mark.parametrize("code", sorted(LOST_OUTPUT))
def test_a_lost_output_code_fails_the_job_whatever_its_message_says(api, agent, code):
    job_id = _run_to_output(api, agent)
    words = "three files stayed behind on the node"  # no prefix the server could recognise
    assert _report(agent, job_id, 3, "finished", code=code, message=words).status_code == 200
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.outcome, job.status_message) == ("released", "failed", words)


def test_a_lost_output_code_without_a_message_still_fails_the_job(api, agent):
    job_id = _run_to_output(api, agent)
    assert _report(agent, job_id, 3, "finished", code=FinishCode.BUNDLE_UPLOAD_FAILED).status_code == 200
    job = Job.objects.get(pk=job_id)
    assert job.outcome == "failed" and "bundle_upload_failed" in job.status_message


def test_the_code_decides_not_the_wording(api, agent):
    """A v3 agent's ``finished`` with a code that is no lost output is not read by its words."""
    job_id = _run_to_output(api, agent)
    message = "bundle upload failed: only the words say so"
    assert _report(agent, job_id, 3, "finished", code=FinishCode.AGENT_ERROR, message=message).status_code == 200
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.outcome) == ("released", "succeeded")  # the bundle is there, whole


def test_a_v2_agents_message_prefix_is_still_read(api, agent):
    """Protocol v2 agents send no code: their fixed prefix stands for it, for one version."""
    job_id = _run_to_output(api, agent)
    message = "outputs not packed: 1 declared file: out/stolen.txt"
    assert _report(agent, job_id, 3, "finished", message=message).status_code == 200
    job = Job.objects.get(pk=job_id)
    assert (job.outcome, job.status_message) == ("failed", message)


def test_a_code_is_only_for_finished_and_only_a_known_one(api, agent):
    job_id = api.post("/api/v1/jobs/", spec(compute=ON_NODE_A), format="json").json()["id"]
    refused = _report(agent, job_id, 1, "running", code=FinishCode.PACKING_FAILED)
    assert refused.status_code == 400 and "code" in refused.json()
    refused = _report(agent, job_id, 1, "finished", code="lost_somehow")
    assert refused.status_code == 400 and "code" in refused.json()


def test_a_stale_attempt_is_answered_with_its_code(api, agent):
    job_id = _run_to_output(api, agent)
    assert _report(agent, job_id, 3, "finished").status_code == 200  # the attempt is over here
    late = _report(agent, job_id, 4, "staging", bytes_done=1)
    assert late.status_code == 409 and late.json()["code"] == ErrorCode.STALE_ATTEMPT
    log = agent.post(f"/api/v1/agent/jobs/{job_id}/log/?attempt=1&offset=0", b"late\n",
                     content_type="application/octet-stream")
    assert log.status_code == 409 and log.json()["code"] == ErrorCode.STALE_ATTEMPT
    batch = agent.post("/api/v1/agent/reports/", {"reports": [
        {"job_id": job_id, "attempt": 1, "seq": 5, "type": "staging", "bytes_done": 1},
        {"job_id": job_id + 1000, "attempt": 1, "seq": 1, "type": "running"},
    ]}, format="json").json()["results"]
    assert [(r["status"], r["code"]) for r in batch] == [(409, "stale_attempt"), (404, "not_on_node")]
    assert all(is_stale(r["status"], r) for r in batch)


def test_the_agent_reads_codes_and_an_older_servers_words():
    """:func:`e31_protocol.is_stale` and :func:`finish_code`, as both sides use them."""
    assert is_stale(409, {"detail": "gone", "code": "stale_attempt"})
    assert not is_stale(409, {"detail": "stale log offset", "code": "log_refused"})  # the code decides
    assert is_stale(409, {"detail": "stale attempt"})  # a v2 server: no code
    assert not is_stale(409, {"detail": "stale", "received_bytes": 10})  # an offset answer
    assert is_stale(404, {"detail": "Not found."}) and not is_stale(400, {"detail": "stale attempt"})
    assert finish_code({"code": "packing_failed", "message": "outputs not packed: x"}) == FinishCode.PACKING_FAILED
    assert finish_code({"message": "packing outputs failed: cap"}) == FinishCode.PACKING_FAILED
    assert finish_code({"code": "something_new"}) is None and finish_code({"message": "all fine"}) is None
