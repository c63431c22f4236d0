"""Live pages over WebSockets: who may connect, snapshot first, then every committed change in order.

Through the real ASGI application (origin check, session auth, routing) and
the real channel layer (Redis when REDIS_URL is set, as in `make test`).
"""
from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core import mail
from django.test import Client

from apps.core.choices import NodeState
from apps.jobs.services.cancel import job_cancel
from apps.notices.services import preference_set
from apps.pool.models import Node
from apps.scheduling.adapter import schedule_cycle
from e31site.asgi import application
from tests.drive import pool_drain

from .factories import Agent, UserFactory, queued_job, rented_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60), pytest.mark.usefixtures("node")]
TIMEOUT = 5  # seconds to wait for one message


def cookie_of(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(path: str, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, path, headers=headers)


def run(coro_fn, *args):
    return async_to_sync(coro_fn)(*args)


def db(fn, *args, **kwargs):
    """Run a database call from the async scenario (on the test's own connection)."""
    return database_sync_to_async(fn)(*args, **kwargs)


def versions(html: str, element_id: str) -> list[int]:
    match = re.search(rf'id="{element_id}"[^>]*?data-version="([0-9 ]+)"', html, re.S)
    assert match, (element_id, html[:500])
    return [int(x) for x in match.group(1).split()]


MARK = re.compile(r'<template data-live="(?:seq|snapshot|beat)"[^>]*></template>')


def content(frame: str) -> str:
    """A frame without its message-number marks (issue 12 item 7): what it renders."""
    return MARK.sub("", frame)


async def receive_content(comm, timeout: float = 5) -> str:
    """The next frame that renders something (frames carrying only a number are skipped)."""
    while True:
        frame = content(await comm.receive_from(timeout))
        if frame:
            return frame


async def nothing_rendered(comm, timeout: float) -> bool:
    """True when no frame within ``timeout`` renders anything (numbers alone may come)."""
    while not await comm.receive_nothing(timeout):
        if content(await comm.receive_from(timeout)):
            return False
    return True


def ids_in(html: str) -> list[str]:
    return re.findall(r'<(?:div|section|tr)\s+id="([a-z0-9-]+)"', html)


async def refused(path: str, cookie: bytes | None = None) -> bool:
    """True when the socket is closed before the handshake completes.

    The application is always told the socket is gone and awaited to its end,
    as a server does: left running, it was cancelled when the scenario's event
    loop closed, and a cancel landing inside the sync consumer's thread hop
    hung that close (60 s, twice in about five whole runs).
    """
    comm = communicator(path, cookie)
    connected, _ = await comm.connect()
    await comm.disconnect()
    return not connected


# --- who may connect ------------------------------------------------------
def test_it_refuses_anonymous_sockets_and_unknown_paths(owner):
    job = queued_job(owner)
    for path in (f"/ws/jobs/{job.pk}/", "/ws/jobs/", "/ws/pool/", "/nonsense", "/ws/jobs/x/"):
        assert run(refused, path), path
    assert run(refused, "/nonsense", cookie_of(owner))


def test_it_closes_the_socket_of_someone_elses_job_with_no_data(owner, stranger):
    job = queued_job(owner)

    async def scenario():
        assert await refused(f"/ws/jobs/{job.pk}/", await db(cookie_of, stranger))
        assert await refused("/ws/jobs/999999/", await db(cookie_of, stranger))
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        await comm.receive_from(TIMEOUT)
        await comm.disconnect()

    run(scenario)


def test_it_never_pushes_one_users_job_to_another(owner, stranger):
    mine = queued_job(stranger, name="strangers-own")

    async def scenario():
        comm = communicator("/ws/jobs/", await db(cookie_of, stranger))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(TIMEOUT)
        assert f"job-row-{mine.pk}" in snapshot
        theirs = await db(queued_job, owner, name="owners-secret")
        assert await nothing_rendered(comm, 0.5)
        await db(schedule_cycle)  # places the owner's job: still nothing for the stranger
        assert await nothing_rendered(comm, 0.5)
        await comm.disconnect()
        return theirs

    run(scenario)


# --- snapshot, then updates in order --------------------------------------
def test_it_sends_a_snapshot_first_then_every_change_with_rising_versions(owner):
    job = rented_job(owner)

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(TIMEOUT)
        assert ids_in(snapshot) == [f"job-{job.pk}-status", f"job-{job.pk}-facts", f"job-{job.pk}-leases",
                                    f"job-{job.pk}-bundle", f"job-{job.pk}-receipt", f"job-{job.pk}-log"]
        assert 'data-job-state="rented"' in snapshot
        seen = [versions(snapshot, f"job-{job.pk}-status")]
        agent = await db(Agent, job)
        await db(agent.say, "accepted")
        await db(agent.say, "running")
        await db(agent.say, "exited", exit_code=0, reason="exit")
        await db(agent.say, "finished")
        states = []
        while "released" not in states:  # running, output, released (accepted adds no event)
            html = await comm.receive_from(TIMEOUT)
            if f'id="job-{job.pk}-status"' in html:
                seen.append(versions(html, f"job-{job.pk}-status"))
                states.append(re.search(r'data-job-state="(\w+)"', html).group(1))
        # Messages within COALESCE_S of each other are merged, and the consumer renders the job as it
        # is when a message arrives: states may be skipped, never shown out of order or going back.
        order = ["rented", "running", "output", "released"]
        assert states == sorted(states, key=order.index) and set(states) <= set(order)
        assert seen == sorted(seen)  # versions never go back
        await comm.disconnect()

    run(scenario)


def test_snapshots_and_pushes_show_times_in_the_owners_time_zone(owner):
    from apps.metering.accounts import profile_set_time_zone
    profile_set_time_zone(owner=owner, time_zone="Asia/Tokyo")
    job = rented_job(owner)

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(TIMEOUT)
        agent = await db(Agent, job)
        await db(agent.say, "running")
        pushed = await receive_content(comm, TIMEOUT)  # a number alone (an earlier, coalesced message) may come first
        for html in (snapshot, pushed):
            stamps = re.findall(r'<time datetime="([^"]+)"', html)
            assert stamps and all(t.endswith("+09:00") for t in stamps), stamps
        await comm.disconnect()

    run(scenario)


def test_it_pushes_log_chunks_at_their_offsets_and_asks_nothing_twice(owner):
    job = rented_job(owner)

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(TIMEOUT)
        assert f'id="job-{job.pk}-logtail" data-attempt="1" data-end="0"' in snapshot
        agent = await db(Agent, job)
        await db(agent.log, b"epoch 1\n")
        await db(agent.log, b"epoch 1\nepoch 2\n")  # the first 8 bytes again: only the rest is new
        first = await receive_content(comm, TIMEOUT)  # a number alone (an earlier message) may come first
        second = await receive_content(comm, TIMEOUT)
        assert 'data-offset="0" data-end="8"' in first and "epoch 1" in first
        assert 'data-offset="8" data-end="16"' in second and "epoch 2" in second and "epoch 1" not in second
        await comm.disconnect()

    run(scenario)


def test_it_sends_a_new_snapshot_when_the_client_asks(owner):
    job = rented_job(owner)

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        first = await comm.receive_from(TIMEOUT)
        agent = await db(Agent, job)
        await db(agent.log, b"line\n")
        assert "data-log-chunk" in await receive_content(comm, TIMEOUT)  # the chunk
        for _ in range(3):  # asked three times within a second of the first: one snapshot, a second later
            await comm.send_to(text_data='{"snapshot": true}')
        await comm.send_to(text_data="not json")
        again = await receive_content(comm, TIMEOUT)
        assert versions(again, f"job-{job.pk}-log") > versions(first, f"job-{job.pk}-log")
        assert "line\n" in again
        assert await nothing_rendered(comm, 1.5)
        await comm.disconnect()

    run(scenario)


def hold_queue() -> None:
    """Every node draining (the operator's ``node_set_drain``): jobs are accepted (a node could hold
    them) but wait in the queue."""
    pool_drain()


def test_a_page_rendered_before_a_change_gets_it_in_the_snapshot(owner):
    """The race the versions exist for: a change commits between the page's render and its socket."""
    hold_queue()
    job = queued_job(owner)
    page = Client()
    page.force_login(owner)
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    rendered = versions(html, f"job-{job.pk}-status")
    job_cancel(job=job)

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(TIMEOUT)
        assert versions(snapshot, f"job-{job.pk}-status") > rendered
        assert 'data-job-state="released"' in snapshot
        await comm.disconnect()

    run(scenario)


# --- My jobs and the scheduler's per-user messages --------------------------
def test_my_jobs_gets_new_rows_and_one_message_per_user_per_cycle(owner, stranger):
    hold_queue()

    async def scenario():
        comm = communicator("/ws/jobs/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        assert content(await comm.receive_from(TIMEOUT)) == ""  # no jobs yet: an empty snapshot
        whole_node = {"gpus": 4, "time_limit": "10m"}  # one at a time on the 4-GPU node
        jobs = [await db(queued_job, owner, name=f"job-{i}", compute=whole_node) for i in range(3)]
        theirs = await db(queued_job, stranger, compute=whole_node)  # changes my queue places, not my rows
        seen = ""
        while not await comm.receive_nothing(0.3):
            seen += await comm.receive_from(TIMEOUT)  # new rows, and the positions of each submit's cycle
        assert all(f'id="job-row-{job.pk}"' in seen for job in jobs)
        assert f'id="job-row-{theirs.pk}"' not in seen and f'id="job-{theirs.pk}-status"' not in seen
        await db(schedule_cycle)  # nothing changed: nothing sent
        assert await nothing_rendered(comm, 0.5)
        await db(Node.objects.update, state=NodeState.UP)
        await db(schedule_cycle)
        messages = []
        while not await comm.receive_nothing(0.5):
            messages.append(await comm.receive_from(TIMEOUT))
        # The first job is placed; the other two get new positions: ONE message for the cycle.
        queue_messages = [m for m in messages if "job-row-" in m and 'data-job-state="queued"' in m]
        assert len(queue_messages) == 1
        assert all(f'id="job-row-{j.pk}"' in queue_messages[0] for j in jobs[1:])
        await comm.disconnect()

    run(scenario)


# --- the pool page ----------------------------------------------------------
def test_the_pool_page_is_live_and_only_staff_get_nodes_and_queue(owner):
    staff = UserFactory(username="operator", is_staff=True)

    async def scenario():
        user_ws = communicator("/ws/pool/", await db(cookie_of, owner))
        staff_ws = communicator("/ws/pool/", await db(cookie_of, staff))
        assert (await user_ws.connect())[0] and (await staff_ws.connect())[0]
        assert ids_in(await user_ws.receive_from(TIMEOUT)) == ["pool-live"]
        assert ids_in(await staff_ws.receive_from(TIMEOUT)) == ["pool-live", "pool-staff"]
        await db(rented_job, owner)  # one job submitted (one more waiting), then placed (1 GPU taken)
        pushed = []
        while not await user_ws.receive_nothing(0.5):
            pushed.append(await user_ws.receive_from(TIMEOUT))
        assert pushed and all(ids_in(m) == ["pool-live"] for m in pushed)
        assert re.search(r"Free now</span><span[^>]*>3<", pushed[-1])
        staff_msgs = [await staff_ws.receive_from(TIMEOUT)]
        while not await staff_ws.receive_nothing(0.3):
            staff_msgs.append(await staff_ws.receive_from(TIMEOUT))
        assert any("pool-staff" in m for m in staff_msgs)
        await user_ws.disconnect()
        await staff_ws.disconnect()

    run(scenario)


def test_a_node_drained_or_lost_reaches_the_pool_page(owner, node):
    from apps.pool.services import node_set_drain
    staff = UserFactory(username="operator", is_staff=True)

    async def scenario():
        staff_ws = communicator("/ws/pool/", await db(cookie_of, staff))
        assert (await staff_ws.connect())[0]
        await staff_ws.receive_from(TIMEOUT)  # the snapshot
        await db(node_set_drain, node=node, drain=True)
        pushed = [await staff_ws.receive_from(TIMEOUT)]
        while not await staff_ws.receive_nothing(0.3):
            pushed.append(await staff_ws.receive_from(TIMEOUT))
        assert any("pool-staff" in m and "draining" in m.lower() for m in pushed)
        await staff_ws.disconnect()

    run(scenario)


# --- e-mail on release ----------------------------------------------------
def test_it_mails_the_owner_on_release_only_when_asked(owner, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    owner.email = "owner@example.com"
    owner.save()
    hold_queue()
    job_cancel(job=queued_job(owner))
    assert mail.outbox == []
    preference_set(user=owner, email_on_release=True)
    job = queued_job(owner, name="mailed")
    job_cancel(job=job)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["owner@example.com"]
    assert f"Job {job.pk} (mailed) released: Cancelled" in mail.outbox[0].subject
    assert f"/jobs/{job.pk}/" in mail.outbox[0].body


def test_the_notice_settings_page_stores_the_choice(owner):
    client = Client()
    client.force_login(owner)
    assert client.get("/notices/").status_code == 200
    resp = client.post("/notices/", {"email_on_release": "on"})
    assert resp.status_code == 302
    assert 'name="email_on_release" checked' in client.get("/notices/").content.decode()
    client.post("/notices/", {})
    assert "checked" not in client.get("/notices/").content.decode()
    assert Client().get("/notices/").status_code == 302  # anonymous: to the sign-in page
