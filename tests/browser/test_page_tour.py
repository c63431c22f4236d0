"""Issue 16, "Done when": a tour of every page in a real browser, at 1400 px and 390 px wide, as
the owner of the jobs, as a stranger and as staff, on ONE live stack for the whole module.

The jobs are driven to every outcome through the real path (the API, a Celery worker, agents
with simulated GPUs): succeeded, failed (``exit 3``), timed out (a short ``time_limit`` over a
``sleep``), cancelled while running and while queued (the cancel API), staging failed (a data
source on a host that does not exist, and an upload whose sha256 does not match), node lost (a
node's agent killed with SIGKILL, one attempt allowed), and, live while the pages are visited,
a queued job, a running one and a job array with tasks done and running.

Each visit checks:

- no horizontal scroll: ``document.documentElement.scrollWidth <= window.innerWidth`` (a wide
  table may scroll inside its own wrapper; the page never does), and the state of every job
  row (My jobs, an array's page) is on screen without scrolling its table;
- no internal id or crash text in what the user reads: no ``upload:<uuid>`` outside the spec's
  YAML block, no Python traceback, no stray ``None``;
- the steps bar (templates/jobs/_status.html) on each job page: ``step-done`` with a check for
  steps passed, ``step-current`` where the job is, ``step-todo`` ahead, ``step-skipped`` for
  steps a released job never reached, and ``step-ended`` with the outcome's own icon on the
  Released step of a job that did not succeed;
- a stranger gets the site's own 404 page ("Not found", in the site's frame) for the owner's
  job, log, bundle, receipt, array and cancel pages, never the owner's data.

Screenshots: a full-page PNG of every visit is kept as a test artifact, in the directory named
by ``E31_TEST_ARTIFACTS`` (default ``var/test-artifacts/browser/`` in the repository, which git
ignores), as ``<role>-<width>-<page>.png`` (roles: owner, stranger, staff, anonymous; widths
1400 and 390); a problem found names the screenshot to look at. Timings: ``pytest -s``.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from devstack import BASE_DIR, LocalStack
from tests.e2e.conftest import E2E_REDIS_DB, database_url, node_token
from tests.factories import PASSWORD, UserFactory, flush_database

from .conftest import CHROMIUM, CHROMIUM_ARGS

# django_db: the session sets the test database up only for tests that ask for it; each test's
# own transaction is rolled back, while what the stack's processes committed stays for the module.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420), pytest.mark.django_db]

WIDTHS = (1400, 390)
HEIGHT = {1400: 900, 390: 844}
EXAMPLES = ("training", "inference", "processing", "simulation")
# Short clocks: SIGTERM-to-SIGKILL grace 1 s, node watch every second, a silent node lost after 30 s
# (the tour's page renders can hold agent heartbeats ~10 s; see the session note).
FAST = {"E31_GRACE_S": "1", "E31_HEARTBEAT_S": "1", "E31_NODE_WATCH_PERIOD_S": "1", "E31_SCHEDULER_PERIOD_S": "1",
        "E31_NODE_LOSS_TIMEOUT_S": "30", "E31_MAX_ATTEMPTS": "1", "E31_AGENT_RETRY_MAX_S": "2",
        "E31_AGENT_POLL_WAIT_S": "5"}
BIG = ["H100", "A100"]  # node-a and node-b; node-c (one L40S) is kept for the node that gets lost

UPLOAD_ID = re.compile(r"upload:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
# Django's own admin says "None available" for an empty list of recent actions: words, not a leak.
NONE = re.compile(r"\bNone\b(?! available)")

# The steps bar of each outcome: (status, icon) for Submitted, Rented, Run started, Run ended, Released.
DONE = ("done", "check")
STEPS = {
    "queued": [("current", "dot"), ("todo", None), ("todo", None), ("todo", None), ("todo", None)],
    "running": [DONE, DONE, ("current", "dot"), ("todo", None), ("todo", None)],
    "succeeded": [DONE] * 5,
    "failed": [DONE] * 4 + [("ended", "failed")],
    "timed_out": [DONE] * 4 + [("ended", "timed_out")],
    "cancelled": [DONE] * 4 + [("ended", "cancelled")],
    "cancelled_queued": [DONE, ("skipped", None), ("skipped", None), ("skipped", None), ("ended", "cancelled")],
    "staging_failed": [DONE, DONE, ("skipped", None), ("skipped", None), ("ended", "failed")],
    "staging_sha": [DONE, DONE, ("skipped", None), ("skipped", None), ("ended", "failed")],
    "node_lost": [DONE, DONE, DONE, ("skipped", None), ("ended", "node_lost")],
}

# Page scripts (evaluated through the DevTools protocol, which the site's CSP does not govern).
WIDTH_JS = """() => {
  const vw = window.innerWidth, sw = document.documentElement.scrollWidth;
  if (sw <= vw) return {vw, sw, culprits: []};
  // The outermost elements sticking out past the right edge, with their widths (not those
  // inside a box that scrolls or clips: they do not widen the page).
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.right <= vw + 0.5 || r.width === 0) continue;
    let inner = false;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (p.getBoundingClientRect().right > vw + 0.5 || getComputedStyle(p).overflowX !== 'visible') {
        inner = true; break;
      }
    }
    const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
    if (!inner) out.push(name + ' right=' + Math.round(r.right) + ' width=' + Math.round(r.width));
  }
  return {vw, sw, culprits: out.slice(0, 6)};
}"""
TEXT_JS = """() => {
  const copy = document.body.cloneNode(true);
  copy.querySelectorAll('section[aria-labelledby="spec-title"]').forEach(e => e.remove());
  return copy.textContent;
}"""
STEPS_JS = """(id) => [...document.querySelectorAll('#job-' + id + '-status .steps .step')].map(li => {
  const status = [...li.classList].find(c => c.startsWith('step-')).slice(5);
  const svg = li.querySelector('.step-icon svg');
  const icon = svg ? [...svg.classList].find(c => c.startsWith('icon-')).slice(5) : null;
  return [status, icon, li.querySelector('.step-label').textContent.trim()];
})"""
ROW_STATES_JS = """() => [...document.querySelectorAll('tr[id^="job-row-"], tr[id^="array-row-"]')].map(tr => {
  const cell = tr.querySelector('.state');
  if (!cell) return [tr.id, 'no state'];
  const r = cell.getBoundingClientRect();
  const seen = r.right <= window.innerWidth + 0.5 && r.left >= -0.5;
  return [tr.id, seen ? 'visible' : 'off-screen at ' + Math.round(r.left) + '..' + Math.round(r.right)];
})"""


def artifacts_dir() -> Path:
    """Where the screenshots go: ``$E31_TEST_ARTIFACTS`` or var/test-artifacts/browser/ in the repo."""
    path = Path(os.environ.get("E31_TEST_ARTIFACTS") or BASE_DIR / "var" / "test-artifacts" / "browser")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class World:
    """The live stack and what the tour visits: job ids by outcome, the array, the users."""

    stack: LocalStack
    jobs: dict[str, int] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    array_id: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.stack.url


def spec(name: str, command: str, *, limit: str = "5m", models: list[str] | None = None, gpus: int = 1,
         data: list[dict] | None = None, outputs: list[str] | None = None, **extra) -> dict:
    doc = {"name": name, "work": {"command": command},
           "compute": {"gpus": gpus, "gpu_model": models or BIG, "time_limit": limit},
           "output": {"paths": outputs or []}, **extra}
    if data:
        doc["data"] = data
    return doc


def submit(client: httpx.Client, doc: dict, files: list | None = None) -> dict:
    if files:
        import yaml

        resp = client.post("/api/v1/jobs/", data={"spec": yaml.safe_dump(doc)}, files=files)
    else:
        resp = client.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()


def job(client: httpx.Client, job_id: int) -> dict:
    return client.get(f"/api/v1/jobs/{job_id}/").json()


def wait(client: httpx.Client, stack: LocalStack, ids: list[int], ready, timeout: float = 90) -> None:
    """Until ``ready(job)`` holds for every job in ``ids`` (as the API shows it)."""
    seen: dict[int, dict] = {}

    def check() -> bool:
        for i in ids:
            seen[i] = job(client, i)
        return all(ready(seen[i]) for i in ids)

    try:
        stack.wait_for(check, timeout=timeout)
    except TimeoutError as exc:
        raise AssertionError({i: (j["state"], j["outcome"], j["status_message"]) for i, j in seen.items()}) from exc


def released(j: dict) -> bool:
    return j["state"] == "released"


def build_world(stack: LocalStack, client: httpx.Client) -> World:
    """Drive jobs to every outcome through the API and the agents; leave a queued job, a running
    one and a part-done array live for the visits."""
    world = World(stack)
    start = time.monotonic()
    # node lost first: a job on node-c's only GPU, and one queued behind it to cancel there
    lost = submit(client, spec("tour-node-lost", "sleep 300", models=["L40S"]))["id"]
    wait(client, stack, [lost], lambda j: j["state"] == "running")
    behind = submit(client, spec("tour-cancelled-queued", "sleep 1", models=["L40S"]))["id"]
    wait(client, stack, [behind], lambda j: j["state"] == "queued")
    client.post(f"/api/v1/jobs/{behind}/cancel/").raise_for_status()
    stack.signal_agent("node-c", signal.SIGKILL)  # the server hears nothing more from node-c

    ended = {
        "succeeded": submit(client, spec("tour-succeeded", "echo hello from the tour; echo 42 > out.txt",
                                         outputs=["out.txt"]))["id"],
        "failed": submit(client, spec("tour-failed", "echo about to fail; exit 3"))["id"],
        "timed_out": submit(client, spec("tour-timed-out", "echo waiting; sleep 120", limit="6s"))["id"],
        "cancelled": submit(client, spec("tour-cancelled", "echo working; sleep 300"))["id"],
        "staging_failed": submit(client, spec("tour-staging-failed", "cat data.bin", data=[
            {"source": "https://no-such-host.invalid/data.bin", "target": "data.bin"}]))["id"],
        "staging_sha": submit(client, spec("tour-staging-sha", "cat data.bin", data=[
            {"source": "upload:data.bin", "target": "data.bin", "sha256": "0" * 64}]),
            files=[("files", ("data.bin", b"not what the checksum says\n"))])["id"],
    }
    wait(client, stack, [ended["cancelled"]], lambda j: j["state"] == "running")
    client.post(f"/api/v1/jobs/{ended['cancelled']}/cancel/").raise_for_status()
    wait(client, stack, [*ended.values(), lost, behind], released)
    world.timings["ended"] = time.monotonic() - start

    # live while visited: node-a's four GPUs held by one job, one queued behind it, an array on node-b
    running = submit(client, spec("tour-running", "echo started; sleep 300", models=["H100"], gpus=4))["id"]
    wait(client, stack, [running], lambda j: j["state"] == "running")
    queued = submit(client, spec("tour-queued", "echo never", models=["H100"], gpus=4))["id"]
    array = submit(client, spec("tour-array", 'if [ "$E31_ARRAY_INDEX" = 0 ]; then echo done; else sleep 300; fi',
                                models=["A100"], array=3))
    wait(client, stack, array["job_ids"], lambda j: released(j) if j["array_index"] == 0 else j["state"] == "running")
    wait(client, stack, [queued], lambda j: j["state"] == "queued" and j["queue_position"] == 1)
    world.timings["live"] = time.monotonic() - start

    world.jobs = {**ended, "node_lost": lost, "cancelled_queued": behind, "running": running, "queued": queued}
    world.array_id = array["array_id"]
    for key, job_id in world.jobs.items():
        got = job(client, job_id)
        world.names[key] = got["name"]
        want = {"node_lost": "node_lost", "cancelled_queued": "cancelled", "staging_failed": "failed",
                "staging_sha": "failed"}.get(key, key if key not in ("running", "queued") else None)
        assert got["outcome"] == want, (key, got["state"], got["outcome"], got["status_message"])
    return world


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """One live stack for the module (node-a 4 x H100, node-b 2 x A100, node-c 1 x L40S, beat for
    the node watch), the three users, and the jobs of :func:`build_world`. The test database is
    flushed after the module, as ``transactional_db`` would."""
    with django_db_blocker.unblock():
        from apps.tokens.services import token_issue

        owner = UserFactory(username="tour-owner")
        UserFactory(username="tour-stranger")
        UserFactory(username="tour-staff", is_staff=True)
        redis_url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{E2E_REDIS_DB}"
        stack = LocalStack(database_url=database_url(), redis_url=redis_url,
                           var_dir=tmp_path_factory.mktemp("tour") / "var", beat=True, env=FAST,
                           agents=[("node-a", "4xH100-80GB"), ("node-b", "2xA100-40GB"), ("node-c", "1xL40S-48GB")],
                           issue_token=node_token)
        try:
            begin = time.monotonic()
            stack.start()
            print(f"stack up in {time.monotonic() - begin:.1f} s")
            client = httpx.Client(base_url=stack.url, timeout=30,
                                  headers={"Authorization": f"Token {token_issue(user=owner)}"})
            stack.wait_for(lambda: sum(m["total"] for m in client.get("/api/v1/pool/").json()) == 7, timeout=60)
            world = build_world(stack, client)
            print("world built:", ", ".join(f"{k} after {v:.1f} s" for k, v in world.timings.items()))
            yield world
            client.post(f"/api/v1/arrays/{world.array_id}/cancel/")
            for key in ("running", "queued"):
                client.post(f"/api/v1/jobs/{world.jobs[key]}/cancel/")
        finally:
            stack.stop(timeout=10)
            flush_database()


@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium, headless, for the whole module (never a browser Playwright downloads)."""
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run does it)")
    # Playwright's sync API runs an event loop in this thread, which Django takes for an async
    # context: the test database's set-up and tear-down around each test are plain sync code.
    unsafe = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            # While Playwright's loop runs, asgiref keeps this thread's ORM connection in a context
            # of its own, which the flush after the module would never see: close it here.
            connections.close_all()
    if unsafe is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE")


class Tour:
    """One role at one width: visits pages, keeps a screenshot of each, collects what is wrong."""

    def __init__(self, chromium, world: World, role: str, width: int):
        self.world, self.role, self.width = world, role, width
        self.context = chromium.new_context(viewport={"width": width, "height": HEIGHT[width]})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.widths: dict[str, int] = {}
        self.spent = {"load": 0.0, "screenshot": 0.0, "checks": 0.0}  # seconds, shown with -s
        self.dir = artifacts_dir()

    def sign_in(self, username: str) -> None:
        self.page.goto(self.world.url + "/accounts/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(self.world.url + "/")

    def shot(self, name: str) -> str:
        """A full-page screenshot kept as a test artifact. Chromium now and then answers "Unable to
        capture screenshot" while a live push re-renders the page; one more try after it settles."""
        path = self.dir / f"{self.role}-{self.width}-{name}.png"
        try:
            self.page.screenshot(path=str(path), full_page=True)
        except PlaywrightError:
            self.page.wait_for_timeout(500)
            self.page.screenshot(path=str(path), full_page=True)
        return path.name

    def visit(self, name: str, path: str | None, *, status: int = 200) -> None:
        """Open ``path`` (None: check the page as it is now), screenshot it and check it."""
        if path is not None:
            begin = time.monotonic()
            resp = self.page.goto(self.world.url + path)
            self.spent["load"] += time.monotonic() - begin
            if resp is None or resp.status != status:
                self.problems.append(f"{name} ({path}): status {resp and resp.status}, wanted {status}")
        self.check(name)

    def check(self, name: str) -> None:
        begin = time.monotonic()
        shot = self.shot(name)
        self.spent["screenshot"] += time.monotonic() - begin
        begin = time.monotonic()
        self._check(name, shot)
        self.spent["checks"] += time.monotonic() - begin

    def _check(self, name: str, shot: str) -> None:
        where = f"{name} at {self.width} px ({shot})"
        size = self.page.evaluate(WIDTH_JS)
        self.widths[name] = size["sw"]
        if size["sw"] > size["vw"]:
            self.problems.append(f"{where}: scrolls sideways, {size['sw']} px wide in {size['vw']} px: "
                                 + "; ".join(size["culprits"]))
        for row, seen in self.page.evaluate(ROW_STATES_JS):  # My jobs, an array's tasks
            if seen != "visible":
                self.problems.append(f"{where}: the state of {row} is {seen}")
        text = self.page.evaluate(TEXT_JS)
        for what, pattern in (("an internal upload id", UPLOAD_ID), ("a Python traceback", TRACEBACK),
                              ("the word None", NONE)):
            found = pattern.search(text)
            if found:
                context = text[max(0, found.start() - 60):found.end() + 60].replace("\n", " ")
                self.problems.append(f"{where}: shows {what}: ...{' '.join(context.split())}...")

    def check_steps(self, key: str) -> None:
        got = self.page.evaluate(STEPS_JS, self.world.jobs[key])
        want = STEPS[key]
        if [(s, i) for s, i, _ in got] != want:
            self.problems.append(f"steps of the {key} job at {self.width} px: {got}, wanted {want}")

    def check_not_found(self, name: str, path: str, secret: str) -> None:
        self.visit(name, path, status=404)
        if not self.page.locator("header.topbar").count() or self.page.locator("h1").inner_text() != "Not found":
            self.problems.append(f"{name} ({path}) at {self.width} px: not the site's own 404 page")
        if secret in self.page.content():
            self.problems.append(f"{name} ({path}) at {self.width} px: shows {secret!r} to a stranger")

    def close(self) -> None:
        print(f"{self.role} at {self.width} px: {len(self.widths)} visits,",
              ", ".join(f"{k} {v:.1f} s" for k, v in self.spent.items()))
        self.context.close()

    def report(self) -> str:
        return f"{self.role} at {self.width} px, screenshots in {self.dir}:\n  " + "\n  ".join(self.problems)


@pytest.fixture
def tour(world, chromium):
    made: list[Tour] = []

    def start(role: str, width: int) -> Tour:
        made.append(Tour(chromium, world, role, width))
        return made[-1]

    yield start
    for t in made:
        t.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_owner_sees_every_page_whole(tour, world, width):
    t = tour("owner", width)
    t.sign_in("tour-owner")
    t.visit("my-jobs", "/")
    t.visit("new-job", "/jobs/new/")
    for name in EXAMPLES:
        t.visit(f"new-job-{name}", f"/jobs/new/?example={name}")
    t.page.goto(world.url + "/jobs/new/")
    t.page.click("button:has-text('Submit job')")  # an empty form: errors field by field
    t.page.wait_for_selector("#errors")
    t.visit("new-job-errors", None)
    for key in STEPS:
        t.visit(f"job-{key}", f"/jobs/{world.jobs[key]}/")
        t.check_steps(key)
    t.visit("array", f"/arrays/{world.array_id}/")
    t.visit("cancel-queued", f"/jobs/{world.jobs['queued']}/cancel/")
    t.visit("cancel-running", f"/jobs/{world.jobs['running']}/cancel/")
    t.visit("cancel-array", f"/arrays/{world.array_id}/cancel/")
    t.visit("usage", "/usage/")
    t.visit("receipt-succeeded", f"/usage/receipts/{world.jobs['succeeded']}/")
    t.visit("receipt-timed-out", f"/usage/receipts/{world.jobs['timed_out']}/")
    t.visit("account-settings", "/account/settings/")
    t.visit("notices", "/notices/")
    t.visit("pool", "/pool/")
    t.visit("api-docs", "/api/docs/")
    t.visit("not-found", "/no-such-page/", status=404)
    assert not t.problems, t.report()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_stranger_gets_the_sites_404_for_the_owners_pages(tour, world, width):
    t = tour("stranger", width)
    t.sign_in("tour-stranger")
    t.visit("my-jobs-empty", "/")
    if not t.page.is_visible("text=No jobs yet"):
        t.problems.append(f"my-jobs-empty at {width} px: no empty state")
    job_id, secret = world.jobs["staging_sha"], world.names["staging_sha"]
    for name, path in (("job", f"/jobs/{job_id}/"), ("log", f"/jobs/{job_id}/log/"),
                       ("bundle", f"/jobs/{world.jobs['succeeded']}/bundle/"),
                       ("receipt", f"/usage/receipts/{job_id}/"), ("array", f"/arrays/{world.array_id}/"),
                       ("cancel", f"/jobs/{world.jobs['running']}/cancel/"),
                       ("cancel-array", f"/arrays/{world.array_id}/cancel/")):
        t.check_not_found(f"owners-{name}", path, secret if name != "bundle" else world.names["succeeded"])
    t.visit("usage-empty", "/usage/")
    t.visit("pool", "/pool/")
    assert not t.problems, t.report()


@pytest.mark.parametrize("width", WIDTHS)
def test_staff_and_signed_out_pages(tour, world, width):
    t = tour("staff", width)
    t.sign_in("tour-staff")
    t.visit("pool", "/pool/")
    t.visit("operator-report", "/usage/report/")
    t.visit("admin", "/admin/")
    t.visit("my-jobs-empty", "/")
    signed_out = tour("anonymous", width)
    signed_out.visit("sign-in", "/accounts/login/")
    signed_out.visit("not-found", "/no-such-page/", status=404)
    t.problems += signed_out.problems
    assert not t.problems, t.report()
