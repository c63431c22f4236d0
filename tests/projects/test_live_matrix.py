"""Issue 25's access matrix for the WebSockets (``e31site/asgi.py``): for owner, admin, member, viewer,
a member of another project and anonymous, who may open a project job's live page and what "My jobs"
shows and pushes. Every member watches a teammate's job live (through the project's group); a
stranger's sockets never carry a row or a frame of it; anonymous is refused. Every routed WebSocket
path has a row here or a stated reason not to (:data:`WS_EXEMPT`).

Through the real ASGI application and channel layer, as ``tests/web/test_live_consumers.py`` does."""
from __future__ import annotations

import pytest

from apps.jobs.services.cancel import job_cancel
from e31site.asgi import websocket_urlpatterns

from ..drive import pool_drain, queued_job
from ..web.test_live_consumers import (
    TIMEOUT,
    communicator,
    content,
    cookie_of,
    db,
    nothing_rendered,
    receive_content,
    run,
)

CALLERS = ("owner", "admin", "member", "viewer", "stranger", "anonymous")
MEMBERS = CALLERS[:4]

# Each routed WebSocket path: who may open it ("members": the project's four roles; "signed-in": any
# user, what it carries is checked below), and the paths routed but exempt, with why.
WS_ROWS = {
    r"^ws/jobs/(?P<pk>[0-9]{1,18})/$": "members",   # a project job's live page
    r"^ws/jobs/$": "signed-in",                     # My jobs: every signed-in user, the project's rows to members
}
WS_EXEMPT = {
    r"^ws/pool/$": "the pool page: the same totals for every signed-in user, no project in it",
    "": "any other path: closed before the handshake, for everyone (RefuseConsumer)",
}


def test_every_websocket_route_has_a_row_or_a_stated_exemption():
    routed = [str(p.pattern) for p in websocket_urlpatterns]
    missing = [r for r in routed if r not in WS_ROWS and r not in WS_EXEMPT]
    stale = [r for r in (*WS_ROWS, *WS_EXEMPT) if r not in routed]
    assert not missing and not stale, f"WebSocket routes with no row: {missing}; rows for no route: {stale}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_each_caller_opens_and_hears_the_projects_job_exactly_as_allowed(team, pool):
    pool_drain()  # the job waits in the queue: its cancel is a release, pushed at once
    job = queued_job(team.owner, project="ml", name="ml-live-4d1")
    users = team.by_role()

    async def scenario():
        lists, pages = {}, {}
        for caller in CALLERS:
            cookie = await db(cookie_of, users[caller]) if caller in users else None
            page = communicator(f"/ws/jobs/{job.pk}/", cookie)
            opened, _ = await page.connect()
            assert opened == (caller in MEMBERS), (caller, "job page")
            if opened:
                assert f"job-{job.pk}-status" in content(await page.receive_from(TIMEOUT)), caller
                pages[caller] = page
            else:
                await page.disconnect()
            listed = communicator("/ws/jobs/", cookie)
            opened, _ = await listed.connect()
            assert opened == (caller != "anonymous"), (caller, "my jobs")
            if not opened:
                await listed.disconnect()
                continue
            snapshot = content(await listed.receive_from(TIMEOUT))
            assert (f"job-row-{job.pk}" in snapshot) == (caller in MEMBERS), (caller, snapshot[:300])
            assert caller in MEMBERS or "ml-live-4d1" not in snapshot
            lists[caller] = listed
        await db(job_cancel, job=job, by=team.admin)  # a change of the job: every member hears it, live
        for caller, listed in lists.items():
            if caller in MEMBERS:
                assert f"job-row-{job.pk}" in await receive_content(listed), (caller, "my jobs push")
            else:
                assert await nothing_rendered(listed, 0.3), (caller, "a stranger's list heard the job")
        for caller, page in pages.items():
            assert f"job-{job.pk}-status" in await receive_content(page), (caller, "job page push")
        for comm in (*lists.values(), *pages.values()):
            await comm.disconnect()

    run(scenario)
