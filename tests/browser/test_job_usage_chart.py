"""The job page's Usage card in a real browser (Debian's chromium), at 1400 px and 390 px: the
charts are drawn from ``metrics/`` and never widen the page; GPU charts only for real GPUs.

No live stack: the page, its static files and the API answers come from this process (Django's
test client), handed to the browser through Playwright's request routing. Screenshots go where
tests/browser/test_page_tour.py puts its own (``usage-<width>-<kind>.png``).
"""
from __future__ import annotations

import mimetypes
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from apps.agent_api.samples import agent_samples_store
from tests.drive import Agent, rented_job
from tests.factories import UserFactory, node_with_gpus

from .test_page_tour import WIDTH_JS, artifacts_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

STATIC = Path(settings.BASE_DIR, "static")
CHARTS_JS = """() => [...document.querySelectorAll('[data-usage-chart]')].map(c => {
  const fig = c.closest('figure');
  return [c.dataset.usageChart, !fig.hidden && c.width > 0 && c.height > 0 && !!window.Chart.getChart(c)];
})"""


def serve(page, client: Client) -> None:
    """Every request of the page answered here: static files from static/, the rest by Django."""
    def handle(route, request):
        path = "/" + request.url.split("/", 3)[3]
        if path.startswith("/static/"):
            file = STATIC / path.removeprefix("/static/").split("?")[0]
            if not file.is_file():
                return route.fulfill(status=404, body="")
            return route.fulfill(status=200, body=file.read_bytes(),
                                 content_type=mimetypes.guess_type(file.name)[0] or "application/octet-stream")
        if path.startswith("/ws/"):
            return route.abort()
        resp = client.get(path)
        return route.fulfill(status=resp.status_code, body=resp.content,
                             content_type=resp.get("Content-Type", "text/html"))
    page.route("**/*", handle)


@pytest.fixture(params=["simulated", "nvml"])
def sampled_job(request, transactional_db):
    """A running job on 2 GPUs with 40 samples from a node whose GPUs are ``simulated`` or real
    (``nvml``); made and committed before the browser starts (in its loop the ORM works on a
    connection of its own, and the pushes of these writes would be refused as async)."""
    kind = request.param
    user = UserFactory(username="charts")
    node_with_gpus(count=2)
    job = rented_job(user, compute={"gpus": 2, "time_limit": "10m"})
    agent = Agent(job)
    agent.start()
    indexes = sorted(lg.gpu.index for lg in agent.lease.lease_gpus.all())
    samples = []
    for i in range(40):
        gpus = [{"index": g, "gpu_util_percent": (i * 7 + g * 13) % 100, "gpu_memory_bytes": (i + 1) * 2**28}
                for g in indexes]
        samples.append({"seq": (i + 1) * 5000, "ago_s": (40 - i) * 5.0, "cpu_percent": 50.0 + (i % 9) * 20,
                        "rss_bytes": (i + 4) * 2**26, "gpus": gpus})
    agent_samples_store(node=agent.lease.node, job_id=job.pk, attempt=1, gpu_source=kind, samples=samples)
    return job, user, kind


def test_the_usage_charts_draw_and_fit_at_every_width(sampled_job, browser):
    job, user, kind = sampled_job
    client = Client()
    client.force_login(user)
    for width in (1400, 390):
        page = browser.new_page(viewport={"width": width, "height": 844})
        serve(page, client)
        page.goto(f"http://testserver/jobs/{job.pk}/")
        page.wait_for_function("() => document.querySelector('[data-usage-charts]') && "
                               "!document.querySelector('[data-usage-charts]').hidden", timeout=15000)
        drawn = dict(page.evaluate(CHARTS_JS))
        shot = artifacts_dir() / f"usage-{width}-{kind}.png"
        page.locator(".job-usage").screenshot(path=str(shot))
        assert drawn["cpu"] and drawn["memory"], (drawn, shot)
        assert drawn["gpu_util"] == drawn["gpu_memory"] == (kind == "nvml"), (drawn, shot)
        fit = page.evaluate(WIDTH_JS)
        assert fit["sw"] <= fit["vw"], (fit, shot)
        card = page.locator(".job-usage").bounding_box()
        assert card["x"] >= 0 and card["x"] + card["width"] <= width + 0.5, (card, shot)
        page.close()
