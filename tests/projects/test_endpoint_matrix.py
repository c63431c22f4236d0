"""Issue 25's access matrix for the whole site: every page and API endpoint a project role can matter
for, with what each of the six callers gets (owner, admin, member, viewer, a member of another project,
anonymous), reads and writes, against one shared world; and a guard that every URL pattern the site
routes has a row here or a stated reason not to (:data:`EXEMPT`), so a new endpoint without a row fails.

The expectations are SPEC §9's table as :mod:`apps.projects.access` encodes it: every member sees the
project's jobs, arrays, logs, outputs, usage, statement, members, secrets' names, tokens and webhooks;
members and up submit (re-run, upload into the project); the job's owner, admins and owners cancel it;
admins and owners change members; owners alone set the budget, secrets, tokens, webhooks and delete.
A stranger gets 404 for everything of the project and never its data; anonymous gets the sign-in page
(pages) or 401 (API). A write is made inside a savepoint that is rolled back, and the table says whether
it took effect, so a refused write is proved to change nothing and an allowed one to do its work.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from apps.artifacts.models import Upload
from apps.hooks import guard
from apps.hooks.models import Webhook
from apps.hooks.services import webhook_create
from apps.jobs.arrays import array_submit
from apps.jobs.models import Job
from apps.metering.models import GpuRate
from apps.projects.models import Membership, Project
from apps.projects.services import member_add, project_create
from apps.secrets.models import Secret
from apps.secrets.services import secret_set
from apps.tokens.models import ApiToken
from apps.tokens.service_tokens import service_token_create

from ..cycles import HarnessCycles
from ..drive import finished_job, queued_job
from ..factories import UserFactory, node_with_gpus, seed_rates, spec

pytestmark = pytest.mark.django_db  # each test in a savepoint of the module's world (see ``world``)

CALLERS = ("owner", "admin", "member", "viewer", "stranger", "anonymous")
MEMBERS = CALLERS[:4]
PROJECT = "atlas"
HOOK_URL = "https://hooks.atlas-example.com/e31"
SECRET_VALUE = "hf_atlas_value_never_shown"
# What only the project's members may ever read: a stranger's or anonymous answer never holds one.
PRIVATE = ("atlas-train-7f3", "atlas-sweep-9c1", "atlas-queued-2b8", "ATLAS_HF_TOKEN", "atlas-ci-bot",
           "hooks.atlas-example.com", SECRET_VALUE)


# --- the world: one project with the four roles, a stranger in another, and something of each kind ------
@dataclass
class World:
    """What the table's URLs name. ``cookies`` signs a client in as each caller (None: anonymous)."""

    project: Project
    users: dict[str, object]
    finished: Job      # the member's job, run to release with an output file (reads)
    queued: Job        # the owner's job, not ended (cancels: a member may not cancel it)
    array_id: int      # the owner's array of 3
    prefix: str        # the service token's key prefix
    webhook_id: int
    media: str
    key_file: Path
    cookies: dict[str, str] = field(default_factory=dict)

    def ids(self) -> dict[str, object]:
        """The values the table's URL templates name."""
        return {"p": PROJECT, "job": self.finished.pk, "queued": self.queued.pk, "array": self.array_id,
                "prefix": self.prefix, "webhook": self.webhook_id}

    def client(self, caller: str) -> Client:
        """A client signed in as ``caller`` (its session made with the world), anonymous for ``anonymous``."""
        client = Client()
        if caller in self.cookies:
            client.cookies["sessionid"] = self.cookies[caller]
        return client


def _public_dns(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]  # every webhook host resolves to a public address; no real resolver is asked


def _build(tmp) -> World:
    if not GpuRate.objects.exists():
        seed_rates()  # a transactional test before this module emptied the tables
    names = {"owner": "olga", "admin": "adam", "member": "mia", "viewer": "vic", "stranger": "sam"}
    users = {caller: UserFactory(username=name) for caller, name in names.items()}
    for extra in ("eve", "zed"):  # eve: a second member, whom the member writes act on; zed: in no project
        users[extra] = UserFactory(username=extra)
    project = project_create(owner=users["owner"], name=PROJECT)
    for caller, role in (("admin", "admin"), ("member", "member"), ("viewer", "viewer"), ("eve", "member")):
        member_add(actor=users["owner"], project=project, who=users[caller].username, role=role)
    project_create(owner=users["stranger"], name="other")
    node_with_gpus("mx-a", count=4)
    node_with_gpus("mx-b", count=4)
    hook, _ = webhook_create(actor=users["owner"], project=project, url=HOOK_URL, events=["released"])
    finished, _ = finished_job(users["member"], files={"out.txt": b"result\n"}, packer=True, project=PROJECT,
                               name="atlas-train-7f3", output={"paths": ["out.txt"]})
    queued = queued_job(users["owner"], project=PROJECT, name="atlas-queued-2b8")
    array = array_submit(owner=users["owner"], document=spec(project=PROJECT, array=3, name="atlas-sweep-9c1")).array
    secret_set(owner=users["owner"], name="ATLAS_HF_TOKEN", value=SECRET_VALUE, now=finished.submitted_at,
               project_id=project.pk)
    token, _ = service_token_create(actor=users["owner"], project=project, name="atlas-ci-bot", role="viewer")
    world = World(project, users, finished, queued, array.pk, token.prefix, hook.pk,
                  media=str(tmp / "media"), key_file=tmp / "secrets_key")
    for caller in CALLERS[:5]:
        client = Client()
        client.force_login(users[caller])
        world.cookies[caller] = client.cookies["sessionid"].value
    return world


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    """The world, made once for the module inside one transaction that is rolled back after its last
    test (nothing is left for other modules); each test runs in a savepoint of it (pytest-django's
    ``db``), each write in one more."""
    tmp = tmp_path_factory.mktemp("matrix")
    harness = HarnessCycles()
    with (django_db_blocker.unblock(), pytest.MonkeyPatch.context() as mp,
          override_settings(MEDIA_ROOT=str(tmp / "media"), E31_SECRETS_KEY_FILE=tmp / "secrets_key")):
        mp.setattr(guard, "_resolve", _public_dns)
        outer = transaction.atomic()
        outer._from_testcase = True  # as TestCase's class-level block: a durable atomic inside stays allowed
        with outer:
            harness.install()
            try:
                yield _build(tmp)
            finally:
                harness.uninstall()
                transaction.set_rollback(True)


@pytest.fixture(autouse=True)
def _media_in_tmp(settings, world):
    """Overrides the suite's fixture of that name: this module's files and secrets key are the world's."""
    settings.MEDIA_ROOT = world.media
    settings.E31_SECRETS_KEY_FILE = world.key_file


# --- the table --------------------------------------------------------------------------------------
# Outcomes: "ok" a 2xx, or a redirect that is not to the sign-in page (a page's write done, a file
# from its storage); "403" refused with the reason (the API's detail names the caller's role); "404";
# "400" a 400 naming ``field``; "no" a page's or a bulk write refused in its own words (a form's error,
# a message, ids skipped) with no effect; "login" anonymous: the sign-in page (pages) or 401 (API).
SEE = ("ok", "ok", "ok", "ok")
SUBMIT = ("ok", "ok", "ok", "403")
CANCEL = ("ok", "ok", "403", "403")      # the owner's job: its owner, admins and owners
MANAGE = ("ok", "ok", "403", "403")      # members: admins and owners
OWNERS = ("ok", "403", "403", "403")     # budget, secrets, tokens, webhooks, delete
ANYONE = ("ok", "ok", "ok", "ok", "ok")  # any signed-in user, the stranger too (their own list, a new project)


@dataclass(frozen=True)
class Row:
    """One endpoint and method: ``url`` is a template over :meth:`World.ids`; ``expect`` the outcomes
    of owner, admin, member, viewer (then stranger, default 404); ``done`` (writes) tells from the
    database whether the write took effect; ``shows`` is a text the answer holds for exactly the
    callers in ``shown_to``."""

    method: str
    url: str
    expect: tuple[str, ...]
    body: dict | Callable[[], dict] | None = None
    done: Callable[[World], bool] | None = None
    field: str = ""
    shows: str = ""
    shown_to: tuple[str, ...] = MEMBERS
    json: bool = True

    @property
    def api(self) -> bool:
        return self.url.startswith("/api/")

    def outcome(self, caller: str) -> str:
        if caller == "anonymous":
            return "login"
        return (*self.expect, "404")[CALLERS.index(caller)]

    @property
    def id(self) -> str:
        return f"{self.method} {self.url}"


def _upload() -> dict:
    return {"file": SimpleUploadedFile("w.bin", b"weights"), "project": PROJECT}


def _new_job_form() -> dict:
    return {"spec_text": json.dumps(spec(project=PROJECT, name="matrix-form"))}  # YAML is a superset of JSON


def _jobs_in_project(w: World) -> int:
    return Job.objects.filter(project=w.project).count()


def _more_jobs(w: World) -> bool:
    return _jobs_in_project(w) > 5  # the world's: the finished job, the queued one, 3 array tasks


def _cancelled(pk_of: Callable[[World], int]) -> Callable[[World], bool]:
    def done(w: World) -> bool:
        job = Job.objects.get(pk=pk_of(w))
        return job.cancel_requested_at is not None or job.state == "released"
    return done


def _array_cancelled(w: World) -> bool:
    return not Job.objects.filter(array_id=w.array_id, state__in=("queued", "rented", "running"),
                                  cancel_requested_at__isnull=True).exists()


def _role_of(username: str) -> Callable[[World], str | None]:
    return lambda w: Membership.objects.filter(project=w.project, user__username=username).values_list(
        "role", flat=True).first()


ROWS: list[Row] = [
    # API: projects and members
    Row("GET", "/api/v1/projects/", ANYONE, shows=f'"{PROJECT}"'),
    Row("POST", "/api/v1/projects/", ANYONE, {"name": "fresh-one"},
        done=lambda w: Project.objects.filter(name="fresh-one").exists()),
    Row("GET", "/api/v1/projects/{p}/", SEE),
    Row("PATCH", "/api/v1/projects/{p}/", OWNERS, {"budget": "10"},
        done=lambda w: Project.objects.get(pk=w.project.pk).budget is not None),
    Row("DELETE", "/api/v1/projects/{p}/", ("400", "403", "403", "403"), field="project",  # it holds jobs
        done=lambda w: not Project.objects.filter(pk=w.project.pk).exists()),
    Row("GET", "/api/v1/projects/{p}/members/", SEE, shows='"eve"'),
    Row("POST", "/api/v1/projects/{p}/members/", MANAGE, {"username": "zed", "role": "viewer"},
        done=lambda w: _role_of("zed")(w) == "viewer"),
    Row("PATCH", "/api/v1/projects/{p}/members/eve/", MANAGE, {"role": "viewer"},
        done=lambda w: _role_of("eve")(w) == "viewer"),
    Row("DELETE", "/api/v1/projects/{p}/members/eve/", MANAGE, done=lambda w: _role_of("eve")(w) is None),
    # API: the project's secrets (names to members, never a value), service tokens, webhooks
    Row("GET", "/api/v1/projects/{p}/secrets/", SEE, shows="ATLAS_HF_TOKEN"),
    Row("POST", "/api/v1/projects/{p}/secrets/", OWNERS, {"name": "NEW_ONE", "value": "v"},
        done=lambda w: Secret.objects.filter(project=w.project, name="NEW_ONE").exists()),
    Row("DELETE", "/api/v1/projects/{p}/secrets/ATLAS_HF_TOKEN/", OWNERS,
        done=lambda w: not Secret.objects.filter(project=w.project, name="ATLAS_HF_TOKEN").exists()),
    Row("GET", "/api/v1/projects/{p}/tokens/", SEE, shows="atlas-ci-bot"),
    Row("POST", "/api/v1/projects/{p}/tokens/", OWNERS, {"name": "ci-two", "role": "member"},
        done=lambda w: ApiToken.objects.filter(project=w.project).count() == 2),
    Row("DELETE", "/api/v1/projects/{p}/tokens/{prefix}/", OWNERS,
        done=lambda w: not ApiToken.objects.filter(project=w.project).exists()),
    Row("GET", "/api/v1/projects/{p}/webhooks/", SEE, shows="hooks.atlas-example.com"),
    Row("POST", "/api/v1/projects/{p}/webhooks/", OWNERS,
        {"url": "https://second.example-hooks.com/x", "events": ["queued"]},
        done=lambda w: Webhook.objects.filter(project=w.project).count() == 2),
    Row("DELETE", "/api/v1/projects/{p}/webhooks/{webhook}/", OWNERS,
        done=lambda w: not Webhook.objects.filter(pk=w.webhook_id).exists()),
    Row("GET", "/api/v1/projects/{p}/webhooks/{webhook}/deliveries/", SEE, shows='"released"'),
    # API: the project's jobs and arrays
    Row("GET", "/api/v1/jobs/?project={p}", ANYONE, shows="atlas-train-7f3"),  # a filter: a stranger's lists none
    Row("POST", "/api/v1/jobs/", ("ok", "ok", "ok", "400", "400"), lambda: spec(project=PROJECT),
        field="project", done=_more_jobs),
    Row("POST", "/api/v1/jobs/cancel/", ("ok", "ok", "no", "no", "no"), {"ids": "{queued}"},
        done=_cancelled(lambda w: w.queued.pk)),
    Row("GET", "/api/v1/jobs/{job}/", SEE),
    Row("POST", "/api/v1/jobs/{queued}/cancel/", CANCEL, done=_cancelled(lambda w: w.queued.pk)),
    Row("POST", "/api/v1/jobs/{job}/rerun/", SUBMIT, {}, done=_more_jobs),
    Row("GET", "/api/v1/jobs/{job}/events/", SEE),
    Row("GET", "/api/v1/jobs/{job}/logs/", SEE),
    Row("GET", "/api/v1/jobs/{job}/metrics/", SEE),
    Row("GET", "/api/v1/jobs/{job}/bundle/", SEE),
    Row("GET", "/api/v1/jobs/{job}/files/", SEE, shows="out.txt"),
    Row("GET", "/api/v1/jobs/{job}/files/out.txt", SEE),
    Row("GET", "/api/v1/arrays/", ANYONE, shows="atlas-sweep-9c1"),
    Row("GET", "/api/v1/arrays/{array}/", SEE),
    Row("POST", "/api/v1/arrays/{array}/cancel/", CANCEL, done=_array_cancelled),
    # API: the project's usage and uploads
    Row("GET", "/api/v1/usage/?project={p}", SEE, shows='"by_member"'),
    Row("POST", "/api/v1/uploads/", ("ok", "ok", "ok", "400", "400"), _upload, field="project", json=False,
        done=lambda w: Upload.objects.filter(project=w.project).exists()),
    # Pages: My jobs, the new-job form, a job and its files, an array
    Row("GET", "/?project={p}", ANYONE, shows="atlas-train-7f3"),
    Row("GET", "/jobs/new/", ANYONE, shows=f'value="{PROJECT}"', shown_to=("owner", "admin", "member")),
    Row("POST", "/jobs/new/", ("ok", "ok", "ok", "no", "no"), _new_job_form, json=False, done=_more_jobs),
    Row("POST", "/jobs/cancel/", ("ok", "ok", "no", "no", "no"), {"ids": "{queued}", "confirm": "1"}, json=False,
        done=_cancelled(lambda w: w.queued.pk)),
    Row("GET", "/jobs/{job}/", SEE),
    Row("GET", "/jobs/{job}/log/", SEE),
    Row("GET", "/jobs/{job}/log/lines/", SEE),
    Row("GET", "/jobs/{job}/bundle/", SEE),
    Row("GET", "/jobs/{job}/files/out.txt", SEE),
    Row("GET", "/jobs/{job}/download/out.txt", SEE),
    Row("GET", "/jobs/{queued}/cancel/", CANCEL),
    Row("POST", "/jobs/{queued}/cancel/", CANCEL, {"confirm": "1"}, json=False, done=_cancelled(lambda w: w.queued.pk)),
    Row("POST", "/jobs/{job}/rerun/", SUBMIT, {}, json=False, done=_more_jobs),
    Row("GET", "/arrays/{array}/", SEE),
    Row("GET", "/arrays/{array}/cancel/", CANCEL),
    Row("POST", "/arrays/{array}/cancel/", CANCEL, {}, json=False, done=_array_cancelled),
    # Pages: usage, receipts, the projects, a project, its statement and members
    Row("GET", "/usage/?project={p}", SEE),
    Row("GET", "/usage/csv/?project={p}", SEE, shows="atlas-train-7f3"),
    Row("GET", "/usage/receipts/{job}/", SEE),
    Row("GET", "/projects/", ANYONE, shows=f"/projects/{PROJECT}/"),
    Row("POST", "/projects/", ANYONE, {"name": "fresh-two"}, json=False,
        done=lambda w: Project.objects.filter(name="fresh-two").exists()),
    Row("GET", "/projects/{p}/", SEE, shows="eve"),
    Row("POST", "/projects/{p}/", ("ok", "ok", "no", "no"), {"username": "zed", "role": "viewer"}, json=False,
        done=lambda w: _role_of("zed")(w) == "viewer"),
    Row("GET", "/projects/{p}/statement/", SEE),
    Row("POST", "/projects/{p}/members/eve/", ("ok", "ok", "no", "no"), {"role": "viewer"}, json=False,
        done=lambda w: _role_of("eve")(w) == "viewer"),
    Row("POST", "/projects/{p}/members/eve/", ("ok", "ok", "no", "no"), {"remove": "1"}, json=False,
        done=lambda w: _role_of("eve")(w) is None),
]


def _fill(value, ids: dict):
    """A body's ``"{queued}"``: the world's id, as a one-id list; any other value as it is."""
    return [ids["queued"]] if value == "{queued}" else value


def _request(w: World, row: Row, caller: str):
    ids = w.ids()
    url = row.url.format(**ids)
    body = row.body() if callable(row.body) else row.body
    if isinstance(body, dict):
        body = {k: _fill(v, ids) for k, v in body.items()}
        if not row.json and isinstance(body.get("ids"), list):
            body["ids"] = [str(i) for i in body["ids"]]
    client = w.client(caller)
    send = getattr(client, row.method.lower())
    if row.method == "GET":
        return send(url)
    if row.json and body is not None:
        return send(url, body, content_type="application/json")
    return send(url, body or {}) if row.method == "POST" else send(url)


def _verdict(row: Row, caller: str, response, done: bool | None) -> str | None:
    """What is wrong with ``caller``'s answer to ``row`` (None: as the table says)."""
    want, status = row.outcome(caller), response.status_code
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode("utf-8", errors="replace")
    if caller in ("stranger", "anonymous") and (leaked := [m for m in PRIVATE if m in text]):
        return f"leaks {leaked} (status {status})"
    if SECRET_VALUE in text:
        return "shows a secret's value"
    to_login = status == 302 and response["Location"].startswith("/accounts/login/")
    if want == "login":
        ok = to_login if not row.api else status == 401
    elif want == "ok":
        ok = 200 <= status < 300 or (status == 302 and not to_login)
    elif want == "no":
        ok = 200 <= status < 400 and not to_login
    elif want == "403":
        ok = status == 403 and (not row.api or f"is {caller}" in response.json().get("detail", ""))
    elif want == "400":
        ok = status == 400 and row.field in response.json()
    else:
        ok = status == int(want)
    if not ok:
        return f"wanted {want}, got {status}: {text[:200]!r}"
    if row.done is not None and done != (want == "ok"):
        return f"wanted {want}, got {status}, but the write {'took' if done else 'did not take'} effect"
    if row.shows and status == 200 and (row.shows in text) != (caller in row.shown_to):
        return f"{row.shows!r} {'shown' if row.shows in text else 'not shown'} ({status})"
    return None


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_caller_gets_exactly_what_its_role_allows(world, row):
    wrong = {}
    for caller in CALLERS:
        with transaction.atomic():  # a write is undone after the look at its effect: the next caller finds the world
            response = _request(world, row, caller)
            done = row.done(world) if row.done is not None else None
            transaction.set_rollback(True)
        if (problem := _verdict(row, caller, response, done)) is not None:
            wrong[caller] = problem
    assert not wrong, f"{row.id}: {wrong}"


def test_a_strangers_404_says_what_a_missing_projects_does(world):
    """No answer tells a stranger that the project exists: the same words as for a name nobody has."""
    client = world.client("stranger")
    for url in ("/api/v1/projects/{}/", "/api/v1/projects/{}/members/", "/api/v1/projects/{}/secrets/",
                "/api/v1/projects/{}/webhooks/", "/api/v1/usage/?project={}"):
        theirs, nobodys = client.get(url.format(PROJECT)), client.get(url.format("no-such-team"))
        assert theirs.status_code == nobodys.status_code == 404, url
        assert theirs.json()["detail"].replace(PROJECT, "X") == nobodys.json()["detail"].replace("no-such-team", "X")


# --- completeness: every routed URL has a row or a reason -------------------------------------------
EXEMPT = {
    # prefix or exact route: why no project role matters there
    "admin/": "the operator's Django admin: staff only (is_staff), no project role opens it",
    "accounts/": "sign-in, sign-out and password pages: public, before any project",
    "api/schema/": "the OpenAPI schema: public, no data",
    "api/docs/": "the API's documentation page: public, no data",
    "api/v1/agent/": "the node agents' API: node tokens, never a user's session or a project role",
    "api/v1/pool/": "the pool's totals: the same for every signed-in user",
    "api/v1/nodes/": "the nodes: the same for every signed-in user (details for staff)",
    "api/v1/account/": "the caller's own account, its limit and its own tokens: no project in it",
    "api/v1/secrets/": "the caller's own secrets (a project's are /projects/{name}/secrets/)",
    "account/": "the caller's own settings, tokens, password, e-mail and secrets pages",
    "notices/": "the caller's own notice settings",
    "pool/": "the pool page: the same for every signed-in user",
    "usage/report/": "the operator's report: staff only",
    "jobs/new/estimate/": "prices the compute part as typed: nothing of any project is read",
    "healthz": "liveness probe: public, no data",
    "readyz": "readiness probe: public, no data",
    "metrics": "Prometheus metrics for the operator: no project data, a scrape token",
}


def _routes(resolver=None, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Every URL pattern the site routes, as its full route (``api/v1/jobs/<id:pk>/``) and callback."""
    for p in (resolver or get_resolver()).url_patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def _exempt(route: str) -> bool:
    return any(route == e or (e.endswith("/") and route.startswith(e)) for e in EXEMPT)


def _route_of(row: Row) -> str:
    sample = {"p": PROJECT, "job": 1, "queued": 2, "array": 3, "prefix": "abcdefgh", "webhook": 4}
    return resolve(row.url.format(**sample).split("?")[0]).route


def test_every_url_pattern_has_a_row_or_a_stated_exemption():
    covered = {_route_of(r) for r in ROWS}
    missing = sorted(route for route, _ in _routes() if route not in covered and not _exempt(route))
    assert not missing, ("URL patterns with no row in tests/projects/test_endpoint_matrix.py ROWS and no reason "
                         f"in EXEMPT: {missing}")


def test_every_method_an_api_view_accepts_has_a_row():
    rows = {(_route_of(r), r.method) for r in ROWS}
    missing = []
    for route, callback in _routes():
        view = getattr(callback, "view_class", None)
        if view is None or _exempt(route) or not route.startswith("api/v1/"):
            continue
        missing += [f"{m.upper()} {route}" for m in ("get", "post", "put", "patch", "delete")
                    if hasattr(view, m) and (route, m.upper()) not in rows]
    assert not missing, f"API methods with no row in ROWS: {missing}"


def test_no_exemption_is_stale():
    routes = [route for route, _ in _routes()]
    stale = [e for e in EXEMPT if not any(r == e or (e.endswith("/") and r.startswith(e)) for r in routes)]
    assert not stale, f"EXEMPT names routes the site no longer has: {stale}"
