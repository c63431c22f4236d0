"""The 500s of issue 11: each is now a clear 4xx, or a 200 that does not lose the job."""
import pytest
from django.core import mail
from rest_framework.test import APIClient

from apps.jobs.models import Job
from apps.notices.services import preference_set
from apps.pool.services import node_token_issue

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)

INVENTORY = {"hostname": "host-a", "gpus": [{"index": i, "uuid": f"GPU-a{i}", "model": "H100-80GB",
                                             "memory_mb": 81559} for i in range(4)],
             "cpus": 32, "memory_bytes": 256 * 10**9, "disk_bytes": 10**12, "simulated": True}
H100 = {"gpus": 1, "time_limit": "10m", "gpu_model": ["H100"]}  # node-a's, the agent of these tests


@pytest.fixture
def agent(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='node-a')}")
    assert client.post("/api/v1/agent/register/", INVENTORY, format="json").status_code == 200
    return client


def test_a_bundle_rank_in_superscript_digits_is_a_404_not_a_500(owner, api, pool):
    job_id = api.post("/api/v1/jobs/", spec(), format="json").json()["id"]
    client = APIClient()
    client.force_login(owner)
    for rank in ("²", "١", "9" * 40):
        assert client.get(f"/jobs/{job_id}/bundle/", {"rank": rank}).status_code == 404


def test_register_with_a_memory_past_bigint_is_a_400_naming_the_field(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name='node-a')}")
    for value in (10**30, 1e30):
        resp = client.post("/api/v1/agent/register/", {**INVENTORY, "memory_bytes": value}, format="json")
        assert resp.status_code == 400, resp.content
        assert "memory_bytes" in resp.content.decode()


@pytest.mark.parametrize("path", [
    "/api/v1/agent/jobs/{big}/report/", "/api/v1/agent/jobs/{big}/log/?attempt=1&offset=0",
    "/api/v1/agent/jobs/{big}/bundle/?attempt=1", "/api/v1/agent/jobs/{big}/bundle/complete/?attempt=1",
    "/api/v1/jobs/{big}/", "/api/v1/jobs/{big}/bundle/",
])
def test_a_job_id_of_ten_to_the_thirty_is_a_404(agent, api, path):
    url = path.format(big=10**30)
    for client in (agent, api):
        assert client.get(url).status_code == 404
        assert client.post(url, {"attempt": 1, "seq": 1, "type": "accepted"}, format="json").status_code == 404


def test_agent_numbers_past_the_columns_are_400s(agent, api):
    job_id = api.post("/api/v1/jobs/", spec(), format="json").json()["id"]
    url = f"/api/v1/agent/jobs/{job_id}/report/"
    resp = agent.post(url, {"attempt": 10**30, "seq": 1, "type": "accepted"}, format="json")
    assert resp.status_code == 400 and "attempt" in resp.json()
    resp = agent.post("/api/v1/agent/heartbeat/", {"running": [{"job_id": 10**30, "attempt": 1}]}, format="json")
    assert resp.status_code == 400


def test_a_job_name_with_a_newline_and_an_email_notice_does_not_break_the_report(owner, api, agent, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    owner.email = "owner@example.com"
    owner.save()
    preference_set(user=owner, email_on_release=True)
    resp = api.post("/api/v1/jobs/", spec(name="two\nlines\r\nBcc: x@example.com", compute=H100), format="json")
    job_id = resp.json()["id"]
    work = agent.get("/api/v1/agent/work/?wait=0").json()
    assert [a["job_id"] for a in work["assignments"]] == [job_id]

    def report(seq, type_, **extra):
        return agent.post(f"/api/v1/agent/jobs/{job_id}/report/", {"attempt": 1, "seq": seq, "type": type_,
                                                                     **extra}, format="json")

    assert report(1, "accepted").status_code == 200
    assert report(2, "running").status_code == 200
    assert report(3, "exited", exit_code=0, reason="exit").status_code == 200
    resp = report(4, "finished")
    assert resp.status_code == 200, resp.content
    assert Job.objects.get(pk=job_id).state == "released"
    [sent] = mail.outbox
    assert "\n" not in sent.subject and "\r" not in sent.subject
    assert "two lines" in sent.subject


def test_a_notice_that_fails_never_breaks_the_report(owner, api, agent, settings, monkeypatch):
    from apps.notices import services

    def boom(**kwargs):
        raise RuntimeError("SMTP is down")

    monkeypatch.setattr(services, "release_email_send", boom)
    job_id = api.post("/api/v1/jobs/", spec(compute=H100), format="json").json()["id"]
    agent.get("/api/v1/agent/work/?wait=0")
    url = f"/api/v1/agent/jobs/{job_id}/report/"
    for seq, type_ in enumerate(["accepted", "running"], 1):
        agent.post(url, {"attempt": 1, "seq": seq, "type": type_}, format="json")
    agent.post(url, {"attempt": 1, "seq": 3, "type": "exited", "exit_code": 0, "reason": "exit"}, format="json")
    assert agent.post(url, {"attempt": 1, "seq": 4, "type": "finished"}, format="json").status_code == 200
    assert Job.objects.get(pk=job_id).state == "released"
