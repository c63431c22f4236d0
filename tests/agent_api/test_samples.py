"""Usage samples: an agent's ``POST jobs/<id>/samples/`` (stored, deduplicated, capped; refused
for another node's job or a stale attempt) and the owner's ``GET jobs/{id}/metrics/``."""
import pytest
from rest_framework.test import APIClient

from apps.jobs.models import JobSample
from apps.pool.services import node_token_issue

from ..drive import Agent, finished_job, rented_job
from ..factories import UserFactory

pytestmark = pytest.mark.django_db


def node_api(name: str) -> APIClient:
    """The agent API as node ``name`` (a fresh token)."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {node_token_issue(name=name)}")
    return client


def body(*seqs: int, source: str = "simulated", gpus: list | None = None) -> dict:
    samples = []
    for s in seqs:
        sample = {"seq": s, "ago_s": 0.5, "cpu_percent": 100.0 + s / 1000, "rss_bytes": 1000 * s}
        if gpus is not None:
            sample["gpus"] = gpus
        samples.append(sample)
    return {"gpu_source": source, "samples": samples}


@pytest.fixture
def running(owner, pool):
    """A running job, its agent (tests/drive.py) and its node's agent API client."""
    job = rented_job(owner)
    agent = Agent(job)
    agent.start()
    return job, agent, node_api(agent.lease.node.name)


def url(job, attempt=None) -> str:
    return f"/api/v1/agent/jobs/{job.pk}/samples/?attempt={attempt or job.attempt}"


def test_samples_are_stored_once_and_served_as_series(running, api):
    job, _, node = running
    gpus = [{"index": 0, "gpu_util_percent": 87, "gpu_memory_bytes": 5 * 2**30},
            {"index": 1, "gpu_util_percent": None, "gpu_memory_bytes": 2**30}]
    resp = node.post(url(job), body(5000, 10000, source="nvml", gpus=gpus), format="json")
    assert resp.status_code == 200 and resp.json() == {"stored": 2}
    again = node.post(url(job), body(10000, 15000, source="nvml", gpus=gpus[:1]), format="json")
    assert again.json() == {"stored": 1}  # seq 10000 was stored already
    metrics = api.get(f"/api/v1/jobs/{job.pk}/metrics/")
    assert metrics.status_code == 200
    data = metrics.json()
    assert (data["job_id"], data["attempt"], data["samples_max"]) == (job.pk, 1, 1000)
    [node_series] = data["nodes"]
    assert node_series["node_rank"] == 0 and node_series["gpu_source"] == "nvml"
    assert node_series["cpu_percent"] == [105.0, 110.0, 115.0]
    assert node_series["rss_bytes"] == [5_000_000, 10_000_000, 15_000_000]
    times = node_series["at_epoch_s"]
    assert len(times) == 3 and all(isinstance(t, float) for t in times)
    assert node_series["gpus"] == [
        {"index": 0, "gpu_util_percent": [87, 87, 87], "gpu_memory_bytes": [5 * 2**30] * 3},
        {"index": 1, "gpu_util_percent": [None, None, None], "gpu_memory_bytes": [2**30, 2**30, None]},
    ]


def test_a_simulated_node_gets_no_gpu_series_whatever_it_sends(running, api):
    job, _, node = running
    fake = [{"index": 0, "gpu_util_percent": 99, "gpu_memory_bytes": 1}]
    assert node.post(url(job), body(1, 2, source="simulated", gpus=fake), format="json").status_code == 200
    [series] = api.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["nodes"]
    assert series["gpu_source"] == "simulated" and series["gpus"] == []
    assert all(s.gpus == [] for s in JobSample.objects.filter(job=job))


def test_samples_are_capped_per_attempt_by_thinning_the_older_ones(running, api, settings):
    settings.E31_JOB_SAMPLES_MAX = 10
    job, _, node = running
    for start in range(1, 40, 5):
        node.post(url(job), body(*range(start, start + 5)), format="json")
    seqs = list(JobSample.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    assert len(seqs) <= 10
    assert seqs[0] == 1 and seqs[-1] == 40  # the start and the newest stay: the whole run, coarser
    series = api.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["nodes"][0]
    assert len(series["at_epoch_s"]) == len(seqs) and series["at_epoch_s"] == sorted(series["at_epoch_s"])


def test_a_stranger_gets_404_and_staff_may_read(running, stranger_api):
    job, _, node = running
    node.post(url(job), body(1), format="json")
    assert stranger_api.get(f"/api/v1/jobs/{job.pk}/metrics/").status_code == 404
    assert APIClient().get(f"/api/v1/jobs/{job.pk}/metrics/").status_code in (401, 403)
    staff = APIClient()
    staff.force_authenticate(UserFactory(username="operator", is_staff=True))
    assert staff.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["nodes"][0]["cpu_percent"] == [100.001]
    assert staff.get("/api/v1/jobs/999999/metrics/").status_code == 404


def test_another_nodes_agent_cannot_write_samples_into_the_job(running, api):
    job, agent, _ = running
    other = "node-b" if agent.lease.node.name != "node-b" else "node-a"
    resp = node_api(other).post(url(job), body(1), format="json")
    assert resp.status_code == 404
    assert not JobSample.objects.filter(job=job).exists()


def test_a_stale_attempt_is_refused_like_other_agent_reports(running, api):
    job, agent, node = running
    agent.end()  # finished: the lease is released
    resp = node.post(url(job), body(1), format="json")
    assert resp.status_code == 409 and resp.json()["code"] == "stale_attempt"
    assert node.post(url(job, attempt=2), body(1), format="json").status_code == 404
    assert api.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["nodes"] == []


@pytest.mark.parametrize("bad, field", [
    ({"gpu_source": "simulated", "samples": []}, "samples"),
    ({"gpu_source": "guess", "samples": [{"seq": 1, "ago_s": 0, "cpu_percent": 1, "rss_bytes": 1}]}, "gpu_source"),
    ({"gpu_source": "none", "samples": [{"seq": 1, "ago_s": -1, "cpu_percent": 1, "rss_bytes": 1}]}, "samples"),
    ({"gpu_source": "none", "samples": [{"seq": 1, "ago_s": 0, "cpu_percent": 1, "rss_bytes": 2**70}]}, "samples"),
    ({"gpu_source": "nvml", "samples": [{"seq": 1, "ago_s": 0, "cpu_percent": 1, "rss_bytes": 1,
                                         "gpus": [{"index": 0, "gpu_util_percent": 101, "gpu_memory_bytes": 0}]}]},
     "samples"),
])
def test_bad_samples_are_a_400_naming_the_field(running, bad, field):
    job, _, node = running
    resp = node.post(url(job), bad, format="json")
    assert resp.status_code == 400 and field in resp.json()


@pytest.mark.parametrize("attempt", ["x", "0", str(2**40)])
def test_a_bad_attempt_is_a_400(running, attempt):
    job, _, node = running
    resp = node.post(f"/api/v1/agent/jobs/{job.pk}/samples/?attempt={attempt}", body(1), format="json")
    assert resp.status_code == 400 and "attempt" in resp.json()


def test_an_older_agent_that_sends_no_samples_still_runs_jobs(owner, pool, api):
    job, _ = finished_job(owner)
    assert job.state == "released" and job.outcome == "succeeded"
    data = api.get(f"/api/v1/jobs/{job.pk}/metrics/").json()
    assert data["nodes"] == [] and data["attempt"] == 1
    assert api.get(f"/api/v1/jobs/{job.pk}/metrics/?attempt=2").status_code == 400
    assert "attempt" in api.get(f"/api/v1/jobs/{job.pk}/metrics/?attempt=x").json()
