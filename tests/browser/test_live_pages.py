"""In a real browser, without a reload: a job submitted through the form goes queued -> rented ->
running -> output -> released on its page, its log tail grows, "My jobs" in a second tab (opened
empty, before the job was submitted) shows its row and follows,
and a page whose socket died mid-run comes back to the right final state.
"""
from __future__ import annotations

import io
import json
import re
import signal
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from apps.jobs.models import Job
from apps.jobs.selectors import log_read
from apps.pool.models import Node
from apps.pool.services import node_set_drain
from apps.scheduling.adapter import schedule_cycle
from devstack import web_command
from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
STATES = ["queued", "rented", "running", "output", "released"]

# Before any page script: record every state the job's status part shows and every
# notification, and mark the window so a reload (which would clear the mark) is caught.
RECORD_STATES = """
window.__e31NoReload = true;
window.__e31Notices = [];  // the Notification API, as if the user had allowed it
window.Notification = function (title) { window.__e31Notices.push(title); };
window.Notification.permission = "granted";
window.Notification.requestPermission = () => Promise.resolve("granted");
window.__e31States = [];
new MutationObserver(() => {
  const el = document.querySelector('[id$="-status"][data-job-state]');
  const seen = window.__e31States;
  if (el && seen[seen.length - 1] !== el.dataset.jobState) seen.push(el.dataset.jobState);
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def drain_all(drain: bool) -> None:
    """Drain (or undrain) every node, in a thread of its own: undraining asks for a scheduling
    cycle, which here runs eagerly and pushes through async_to_sync, not allowed in the thread
    where Playwright runs its event loop."""
    def work() -> None:
        try:
            for node in Node.objects.all():
                node_set_drain(node=node, drain=drain)
            if not drain:  # the cycle undraining asks for: this stack has no beat, and the
                schedule_cycle()  # harness runs asked-for cycles only on the test's own thread
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(work).result()


def job_story(job_id: int) -> dict:
    """What to show when the job itself went wrong: its state, timeline and the end of its log."""
    job = Job.objects.get(pk=job_id)
    return {"state": job.state, "outcome": job.outcome, "events": list(job.events.values_list("detail", flat=True)),
            "log": log_read(job, max(0, job.log_size - 2000))}


def sign_in(page, base_url: str, username: str) -> None:
    page.goto(base_url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + "/")


def wait_live(page) -> None:
    """Until the page's socket is open (the "live" badge shows)."""
    page.wait_for_selector("[data-live-badge]:not([hidden])", timeout=10_000)


def test_a_job_goes_through_the_five_steps_live_in_the_browser(stack, browser):
    UserFactory(username="viewer")
    drain_all(True)  # hold the queue, so the page shows "queued" first
    web, other_web = stack.urls  # agents talk to the first uvicorn; the second is killed mid-run
    context = browser.new_context(accept_downloads=True)
    context.add_init_script(RECORD_STATES)
    page = context.new_page()
    sign_in(page, web, "viewer")
    # My jobs opened first, while the user has no job at all: the row must arrive live (issue 16 item 6).
    jobs_tab = context.new_page()
    jobs_tab.goto(web + "/")
    wait_live(jobs_tab)
    assert jobs_tab.is_visible("text=No jobs yet") and not jobs_tab.is_visible("#job-rows")

    # Submit the training example through the form, a longer run so the log grows while we watch.
    page.goto(web + "/jobs/new/?example=training")
    command = page.locator("[name=command]")
    if command.count() and command.input_value():
        command.fill(command.input_value().replace("--epochs 30", "--epochs 1200"))
    else:
        spec = page.locator("[name=spec_text]")
        spec.fill(spec.input_value().replace("--epochs 30", "--epochs 1200"))
    page.click("button:has-text('Submit job')")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_id = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    status = f"#job-{job_id}-status"
    wait_live(page)
    assert page.get_attribute(status, "data-job-state") == "queued"

    # The My jobs tab, opened empty, shows the new row without a reload; a third job page on the
    # uvicorn that will be killed.
    jobs_tab.wait_for_selector(f'#job-row-{job_id}[data-job-state="queued"]', timeout=10_000)
    assert jobs_tab.is_visible(f"#job-row-{job_id}") and not jobs_tab.is_visible("text=No jobs yet")
    assert jobs_tab.evaluate("window.__e31NoReload") is True
    doomed = context.new_page()
    doomed.goto(f"{other_web}/jobs/{job_id}/")
    wait_live(doomed)

    drain_all(False)  # let it run
    page.wait_for_selector(f'{status}[data-job-state="running"]', timeout=60_000)

    # Mid-run: close My jobs' socket from the page (it reconnects by itself) and kill the
    # second uvicorn outright; the doomed page keeps trying while the job finishes.
    jobs_tab.evaluate("window.e31Live.socket.close()")
    killed = stack.procs[1]
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    stack.procs.remove(killed)

    # The log tail grows under our eyes; the doomed page's follows the end (it was not
    # scrolled), while on this page the reader scrolled to the top and stays there.
    logtail = f"#job-{job_id}-logtail"
    # a selector, not wait_for_function: that evaluates a string in the page, which the CSP forbids
    page.wait_for_selector(f"{logtail}[data-end]:not([data-end='0']):not([data-end=''])", state="attached")
    # Until the log overflows its box: before that, its top is its end and the page rightly follows it.
    room = ("(() => { const b = document.querySelector('[data-autoscroll]');"
            " return b.scrollHeight - b.clientHeight; })()")
    deadline = time.monotonic() + 60
    while page.evaluate(room) < 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    page.evaluate("""(() => { const box = document.querySelector('[data-autoscroll]');
        box.scrollTop = -(box.scrollHeight - box.clientHeight);  // the top of a column-reverse box
        box.dispatchEvent(new Event('scroll')); })()""")
    sizes, places = [], []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and page.get_attribute(status, "data-job-state") == "running":
        sizes.append(int(page.get_attribute(logtail, "data-end")))
        places.append(page.evaluate("window.e31Live.logFromTop()"))
        time.sleep(0.2)
    assert len(set(sizes)) >= 2 and sizes == sorted(sizes), (sizes, job_story(job_id))
    assert all(p["fromTop"] < 10 for p in places), places  # not pulled down as the log grew

    page.wait_for_selector(f'{status}[data-job-state="released"]', timeout=60_000)
    assert page.evaluate("window.__e31States") == STATES
    assert page.evaluate("window.__e31NoReload") is True
    assert "epoch 1200/1200" in page.inner_text(logtail)
    assert Job.objects.get(pk=job_id).outcome == "succeeded", job_story(job_id)
    # Told in words for screen readers and, with consent, by a notification on start and release.
    assert "is now released, succeeded" in page.inner_text("#live-announcer")
    assert page.evaluate("window.__e31Notices") == [f"Job {job_id} is running", f"Job {job_id} is released (succeeded)"]
    assert "Succeeded" in page.inner_text(status)

    # My jobs followed without a reload, through its own socket's close.
    jobs_tab.wait_for_selector(f'#job-row-{job_id}[data-job-state="released"]', timeout=20_000)
    assert jobs_tab.evaluate("window.__e31NoReload") is True

    # The killed server comes back on the same port; the doomed page reconnects and its
    # snapshot brings the final state it missed.
    port = other_web.rsplit(":", 1)[1]
    stack._spawn("web1-again", web_command("127.0.0.1", int(port)), stack._env())
    doomed.wait_for_selector(f'{status}[data-job-state="released"]', timeout=30_000)
    assert doomed.evaluate("window.__e31NoReload") is True
    assert doomed.evaluate("window.e31Live.logFromTop()")["toEnd"] < 10  # follows the end of the log
    assert doomed.locator(f"#job-{job_id}-bundle a:has-text('Download bundle')").count() == 1

    # The bundle downloads from the page, with the manifest of the declared outputs.
    with page.expect_download() as download:
        page.click(f"#job-{job_id}-bundle a:has-text('Download bundle')")
    with tarfile.open(fileobj=io.BytesIO(open(download.value.path(), "rb").read()), mode="r:*") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert any(f["path"] == "metrics.json" for f in manifest["files"])
    # And the whole log.
    with page.expect_download() as log_download:
        page.click(f"#job-{job_id}-log a:has-text('Download the whole log')")
    assert b"epoch 1200/1200" in open(log_download.value.path(), "rb").read()
    context.close()
