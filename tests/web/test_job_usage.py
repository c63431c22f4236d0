"""The job page's Usage card: empty states by where the job is, peaks in words, the GPU note,
and what the charts' script needs (tests/browser draws them at 390 px)."""
import pytest
from django.utils.html import escape

from apps.agent_api.samples import agent_samples_store
from apps.web.jobs.usage import EMPTY_ENDED, EMPTY_RUNNING, EMPTY_WAITING, SIMULATED_NOTE

from ..drive import pool_drain
from .conftest import signed_in
from .factories import Agent, finished_job, queued_job, rented_job

pytestmark = pytest.mark.django_db


def card(html: str) -> str:
    start = html.index('class="card job-usage"')
    return html[start:html.index("</section>", start)]


def sample(seq: int, cpu: float, rss: int, gpus=None) -> dict:
    return {"seq": seq, "ago_s": 0.0, "cpu_percent": cpu, "rss_bytes": rss, "gpus": gpus or []}


def test_a_waiting_job_says_the_charts_start_when_it_runs(web, user, node):
    pool_drain()  # the node takes nothing: the job waits
    job = queued_job(user, name="waits")
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "Usage" in card(html) and escape(EMPTY_WAITING) in card(html)
    assert f'data-metrics-url="/api/v1/jobs/{job.pk}/metrics/"' in html
    assert "vendor/chart.umd.min.js" in html and "js/job-usage.js" in html


def test_a_running_job_without_samples_yet_says_so_and_refreshes(web, user, node):
    job = rented_job(user)
    Agent(job).start()
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert escape(EMPTY_RUNNING) in card(html) and 'data-live="1"' in card(html)


def test_a_job_that_ran_before_sampling_says_so(web, user, node):
    job, _ = finished_job(user)
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert escape(EMPTY_ENDED) in card(html) and 'data-live="0"' in card(html)


def test_samples_show_as_peaks_and_a_simulated_node_says_it_has_no_gpu_figures(web, user, node):
    job = rented_job(user)
    agent = Agent(job)
    agent.start()
    agent_samples_store(node=agent.lease.node, job_id=job.pk, attempt=1, gpu_source="simulated",
                        samples=[sample(1, 95.0, 2 * 2**30), sample(2, 180.4, 3 * 2**30)])
    html = card(web.get(f"/jobs/{job.pk}/").content.decode())
    assert "Peak CPU" in html and "180 %" in html and "3.0\xa0GB" in html
    assert escape(SIMULATED_NOTE) in html and "GPU 0 peak" not in html
    assert 'data-usage-empty hidden' in html


def test_real_gpu_samples_show_each_gpus_peak(web, user, node):
    job = rented_job(user)
    agent = Agent(job)
    agent.start()
    gpu = agent.lease.lease_gpus.first().gpu.index
    agent_samples_store(node=agent.lease.node, job_id=job.pk, attempt=1, gpu_source="nvml", samples=[
        sample(1, 50.0, 2**30, [{"index": gpu, "gpu_util_percent": 40, "gpu_memory_bytes": 2**30}]),
        sample(2, 60.0, 2**30, [{"index": gpu, "gpu_util_percent": 97, "gpu_memory_bytes": 20 * 2**30}]),
    ])
    html = card(web.get(f"/jobs/{job.pk}/").content.decode())
    assert f"GPU {gpu} peak" in html and "97 %" in html and "20.0\xa0GB" in html
    assert "simulated" not in html


def test_a_stranger_sees_neither_the_page_nor_the_series(user, stranger_user, node):
    job = rented_job(user)
    stranger = signed_in(stranger_user)
    assert stranger.get(f"/jobs/{job.pk}/").status_code == 404
    assert stranger.get(f"/api/v1/jobs/{job.pk}/metrics/").status_code == 404
    assert signed_in(user).get(f"/api/v1/jobs/{job.pk}/metrics/").status_code == 200
