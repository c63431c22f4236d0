"""A declared output that matched no file (issue 16, item 8): the agent names it with the
bundle's ``complete``; the job's API and page warn; an older agent that says nothing: no warning."""
import hashlib
import io
import tarfile

import pytest

from apps.jobs.models import Job

from ..factories import spec
from ..web.conftest import signed_in

pytestmark = pytest.mark.django_db(transaction=True)


def _run_to_complete(api, agent, *, unmatched=None, outputs=("results/*.csv", "out/**")) -> tuple[int, int]:
    doc = spec(compute={"gpus": 1, "time_limit": "10m", "gpu_model": ["H100"]}, output={"paths": list(outputs)})
    job_id = api.post("/api/v1/jobs/", doc, format="json").json()["id"]
    [assignment] = agent.get("/api/v1/agent/work/?wait=0").json()["assignments"]
    assert assignment["job_id"] == job_id
    seq = 0

    def report(type_, **extra):
        nonlocal seq
        seq += 1
        resp = agent.post(f"/api/v1/agent/jobs/{job_id}/report/", {"attempt": 1, "seq": seq, "type": type_, **extra},
                          format="json")
        assert resp.status_code == 200, resp.json()

    report("accepted")
    report("running")
    report("exited", exit_code=0, reason="exit")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("out/a.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"a"))
    data = buf.getvalue()
    url = f"/api/v1/agent/jobs/{job_id}/bundle/?attempt=1&offset=0"
    assert agent.put(url, data, content_type="application/octet-stream",
                     HTTP_X_CONTENT_SHA256=hashlib.sha256(data).hexdigest()).status_code == 200
    body = {"size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "files": [{"path": "out/a.txt", "size_bytes": 1, "sha256": hashlib.sha256(b"a").hexdigest()}]}
    if unmatched is not None:
        body["unmatched"] = unmatched
    done = agent.post(f"/api/v1/agent/jobs/{job_id}/bundle/complete/?attempt=1", body, format="json")
    report("finished")
    return job_id, done.status_code


def test_a_declared_output_that_matched_nothing_is_flagged(api, agent, owner):
    job_id, status = _run_to_complete(api, agent, unmatched=["results/*.csv"])
    assert status == 200
    job = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "released" and job["outcome"] == "succeeded"  # a warning, not a failure
    assert job["outputs_unmatched"] == ["results/*.csv"]
    assert job["warnings"] == ["output `results/*.csv` matched no file"]
    html = signed_in(owner).get(f"/jobs/{job_id}/").content.decode()
    assert "Declared output <code>results/*.csv</code> matched no file." in html


def test_all_matched_and_an_older_agent_give_no_warning(api, agent, owner):
    for unmatched in ([], None):
        job_id, status = _run_to_complete(api, agent, unmatched=unmatched)
        assert status == 200
        job = api.get(f"/api/v1/jobs/{job_id}/").json()
        assert job["outputs_unmatched"] == [] and job["warnings"] == []
        assert "matched no file" not in signed_in(owner).get(f"/jobs/{job_id}/").content.decode()
    assert Job.objects.filter(outputs_unmatched__isnull=True).count() == 1  # the older agent said nothing


@pytest.mark.parametrize("bad", ["results/*.csv", [["nested"]], ["x" * 1001]])
def test_a_malformed_list_is_refused_naming_the_field(api, agent, bad):
    _job_id, status = _run_to_complete(api, agent, unmatched=bad)
    assert status == 400


def test_a_stranger_sees_no_warning(api, agent, stranger_api):
    job_id, _ = _run_to_complete(api, agent, unmatched=["results/*.csv"])
    assert stranger_api.get(f"/api/v1/jobs/{job_id}/").status_code == 404
