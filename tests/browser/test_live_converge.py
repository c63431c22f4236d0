"""Issue 12 item 7 in a real browser: "My jobs" opened empty shows a new job's row, and a page
whose message about the job's release was lost (numbered, never delivered) notices the gap from
the consumer's heartbeat, asks for a snapshot and shows the job released, without a reload."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connections
from django.urls import reverse

from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from apps.live import push as live
from apps.pool.models import Node
from devstack import LocalStack
from tests.e2e.conftest import database_url, node_token
from tests.factories import UserFactory
from tests.web.factories import queued_job

from .test_live_pages import drain_all, sign_in, wait_live

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def stack(transactional_db, tmp_path):
    """One uvicorn, a worker, one agent; live heartbeats every second."""
    live_stack = LocalStack(database_url=database_url(), redis_url=settings.REDIS_URL, var_dir=tmp_path / "var",
                            agents=[("node-a", "1xH100-80GB")], env={"E31_LIVE_HEARTBEAT_S": "1"},
                            issue_token=node_token)
    live_stack.start()
    try:
        yield live_stack
    finally:
        live_stack.stop()


def in_thread(fn, *args, **kwargs):
    """Run ``fn`` off Playwright's event-loop thread (its pushes use async_to_sync)."""
    def work():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()


def test_my_jobs_opened_empty_takes_rows_and_heals_a_lost_release(stack, browser, monkeypatch):
    user = UserFactory(username="empty-viewer")
    stack.wait_for(lambda: Node.objects.filter(name="node-a").exists(), timeout=30)
    drain_all(True)  # the job stays queued until we cancel it
    page = browser.new_context().new_page()
    sign_in(page, stack.urls[0], "empty-viewer")
    page.goto(stack.urls[0] + reverse("jobs:list"))
    wait_live(page)
    assert page.is_visible("text=No jobs yet")

    job = in_thread(queued_job, user, name="first-ever")
    page.wait_for_selector(f'#job-row-{job.pk}[data-job-state="queued"]', timeout=15_000)
    assert page.is_hidden("text=No jobs yet")

    async def numbered_and_lost(layer, group, message):
        await live.live_seq.counter(layer).incr(group)  # numbered, then dropped (a full channel)

    monkeypatch.setattr(live, "send_numbered", numbered_and_lost)
    in_thread(job_cancel, job=Job.objects.get(pk=job.pk))
    # the heartbeat names a number the page never got; the snapshot it asks for shows the release
    page.wait_for_selector(f'#job-row-{job.pk}[data-job-state="released"]', timeout=20_000)
    assert page.evaluate("window.e31Live.stats.gaps") >= 1
