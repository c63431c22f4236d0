"""Submit refuses data sources that name a non-public address (400 on data[i].source);
outputs left out make the outcome failed with the reason (issue 11)."""
import pytest
from rest_framework.test import APIClient

from apps.jobs.models import Job
from apps.pool.services import node_token_issue

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("source", [
    "https://127.0.0.1:5432/x", "https://[::1]/x", "https://2130706433/x", "https://0x7f.1/x",
    "https://169.254.169.254/latest/meta-data/", "https://10.0.0.1/d.csv", "https://100.64.0.1/d",
    "https://[::ffff:127.0.0.1]/x", "https://localhost:6379/", "https://db.localhost/", "https://0.0.0.0/",
    "https://224.0.0.1/",
])
def test_a_literal_non_public_source_is_a_400_on_its_field(api, pool, source):
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "https://example.com/ok.csv"}, {"source": source}]),
                    format="json")
    assert resp.status_code == 400
    assert list(resp.json()) == ["data[1].source"]
    assert "address" in resp.json()["data[1].source"][0]


def test_public_sources_and_allowed_hosts_pass(api, pool, settings):
    assert api.post("/api/v1/jobs/", spec(data=[{"source": "https://93.184.215.14/x"}]),
                    format="json").status_code == 201
    settings.E31_DATA_ALLOW_HOSTS = ["10.0.0.0/8", "localhost"]
    for source in ("https://10.1.2.3/x", "https://localhost/x"):
        assert api.post("/api/v1/jobs/", spec(data=[{"source": source}]), format="json").status_code == 201


@pytest.mark.parametrize("message", [
    "outputs not packed: 1 declared file: out/stolen.txt (a hard link to a file outside the job dir)",
    "packing outputs failed: 50,000 output files is over the cap of 10,000 files a job may return; nothing was packed",
])
def test_outputs_left_out_make_the_job_failed_with_the_reason(api, pool, message):
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='node-a')}")
    inventory = {"hostname": "host-a", "gpus": [{"index": i, "uuid": f"GPU-a{i}", "model": "H100-80GB",
                                                  "memory_mb": 81559} for i in range(4)],
                 "cpus": 32, "memory_bytes": 256 * 10**9, "simulated": True}
    assert agent.post("/api/v1/agent/register/", inventory, format="json").status_code == 200
    job_id = api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "time_limit": "10m", "gpu_model": ["H100"]}),
                      format="json").json()["id"]
    agent.get("/api/v1/agent/work/?wait=0")
    url = f"/api/v1/agent/jobs/{job_id}/report/"
    for seq, body in enumerate([{"type": "accepted"}, {"type": "running"},
                                {"type": "exited", "exit_code": 0, "reason": "exit"},
                                {"type": "finished", "message": message}], 1):
        assert agent.post(url, {"attempt": 1, "seq": seq, **body}, format="json").status_code == 200
    job = Job.objects.get(pk=job_id)
    assert job.state == "released" and job.outcome == "failed"
    assert job.status_message == message
