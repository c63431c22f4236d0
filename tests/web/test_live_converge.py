"""Issue 12 item 7: live pages converge. Every frame carries the group message numbers it answers;
a message a full channel dropped shows as a number the page never got (the consumer's heartbeat
names it), and the snapshot the page then asks for shows the final state; group membership is
renewed so a page open past the group expiry still hears; "My jobs" opened empty takes new rows.

Through the real ASGI application and the Redis channel layer (REDIS_URL), as
tests/web/test_live_consumers.py.
"""
from __future__ import annotations

import re
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse

from apps.jobs.services.cancel import job_cancel
from apps.live import push as live
from tests.drive import pool_drain

from .factories import UserFactory, queued_job
from .test_live_consumers import communicator, content, cookie_of, db, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120), pytest.mark.usefixtures("node")]
SEQS = re.compile(r'<template data-live="(seq|snapshot|beat)" data-live-seqs="([^"]*)"')


def numbers(frame: str) -> list[tuple[str, dict[str, int]]]:
    """``[(kind, {group: n})]`` of the marks in ``frame``."""
    out = []
    for kind, pairs in SEQS.findall(frame):
        out.append((kind, {p.rsplit(":", 1)[0]: int(p.rsplit(":", 1)[1]) for p in pairs.split()}))
    return out


@pytest.fixture
def small_channels(settings):
    """The Redis layer with a channel capacity of 100, group expiry 2 s, heartbeats every 0.5 s."""
    if not django_settings.REDIS_URL:
        pytest.fail("live tests need REDIS_URL (the Redis channel layer)")
    layer = dict(settings.CHANNEL_LAYERS["default"])
    layer["CONFIG"] = {**layer["CONFIG"], "capacity": 100, "group_expiry": 2}
    settings.CHANNEL_LAYERS = {"default": layer}
    settings.E31_LIVE_HEARTBEAT_S = 0.5
    settings.E31_LIVE_GROUP_RENEW_S = 3600  # capped at half the expiry: 1 s
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def hold_queue() -> None:
    """Every node draining: jobs are accepted but wait in the queue."""
    pool_drain()


def test_every_frame_says_its_numbers_in_order(small_channels):
    owner = UserFactory(username="numbered")
    hold_queue()

    async def scenario():
        comm = communicator("/ws/jobs/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        (kind, start), = numbers(await comm.receive_from(5))
        assert kind == "snapshot" and set(start) == {f"user-{owner.pk}"}
        group = f"user-{owner.pk}"
        for i in range(3):
            await db(queued_job, owner, name=f"n{i}")
            time.sleep(live.COALESCE_S + 0.05)  # one message each (not coalesced)
        got, beat = [], None
        while beat is None or beat[group] != (got[-1] if got else start[group]):
            for kind, n in numbers(await comm.receive_from(5)):
                if kind == "seq":
                    got.append(n[group])
                elif kind == "beat":
                    beat = n  # the heartbeat names the last number sent
        assert len(got) >= 3  # a message per submit at least (the cycles' queue places may add some)
        assert got == list(range(start[group] + 1, start[group] + 1 + len(got)))  # no gap, in order
        await comm.disconnect()

    run(scenario)


def test_a_full_channel_drops_messages_and_the_page_notices_then_heals(small_channels, monkeypatch):
    """The issue's case: 300 changes to a socket that reads nothing meanwhile; 100 fit in its
    channel, the rest are dropped: the numbers show the gap (the heartbeat names numbers never
    received). Then the release itself is lost: the page alone would stay "queued"; the heartbeat
    shows the gap and the snapshot the page asks for shows the job released."""
    owner = UserFactory(username="flooded")
    hold_queue()
    job = queued_job(owner, name="flooded")
    group = f"user-{owner.pk}"

    def flood() -> None:
        layer = get_channel_layer()
        for _ in range(300):
            async_to_sync(live.send_numbered)(layer, group, {"type": live.MESSAGE_TYPE, "page": "user",
                                                             "id": owner.pk, "jobs": [job.pk],
                                                             "version": live.stamp_ms()})

    async def drain(comm, quiet_s: float = 2.0) -> tuple[int, int, int, str]:
        """Frames until no numbered message came for ``quiet_s``: (received, last, heartbeat's, html)."""
        seen, last, told, html = 0, 0, 0, ""
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            if await comm.receive_nothing(0.2):
                continue
            frame = await comm.receive_from(5)
            for kind, n in numbers(frame):
                if kind == "seq":
                    seen, last, quiet_since = seen + 1, max(last, n[group]), time.monotonic()
                elif kind == "beat":
                    told = max(told, n[group])
            html += content(frame)
        return seen, last, told, html

    async def snapshot(comm) -> str:
        await comm.send_to(text_data='{"snapshot": true}')
        while True:
            frame = await comm.receive_from(5)
            if any(kind == "snapshot" for kind, _ in numbers(frame)):
                return frame

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        assert 'data-job-state="queued"' in await comm.receive_from(5)
        thread = threading.Thread(target=flood)
        thread.start()
        thread.join()  # this loop (the consumer's) is blocked meanwhile: the socket reads nothing
        seen, last, told, _ = await drain(comm)
        assert 90 <= seen <= 110, seen  # about the channel's capacity of the 300 sent
        assert told > last  # the heartbeat names numbers never received: the page asks for a snapshot
        again = await snapshot(comm)
        assert dict(numbers(again))["snapshot"][group] >= told

        async def numbered_and_lost(layer, group, message):
            await live.live_seq.counter(layer).incr(group)  # numbered, then dropped as a full channel does

        monkeypatch.setattr(live, "send_numbered", numbered_and_lost)
        await db(job_cancel, job=job)  # released; its message is lost
        _, last, told, html = await drain(comm)
        assert 'data-job-state="released"' not in html  # the pushes alone leave the page "queued"
        assert told > dict(numbers(again))["snapshot"][group]  # but the heartbeat shows the gap
        healed = await snapshot(comm)
        assert 'data-job-state="released"' in healed
        await comm.disconnect()

    run(scenario)


def test_a_page_open_past_the_group_expiry_still_hears(small_channels):
    owner = UserFactory(username="patient")
    hold_queue()

    async def scenario():
        comm = communicator("/ws/jobs/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        await comm.receive_from(5)
        end = time.monotonic() + 4  # twice the group expiry, the consumer's heartbeats running
        while time.monotonic() < end:
            await comm.receive_nothing(0.2)
        job = await db(queued_job, owner, name="late")
        frame = ""
        while f'id="job-row-{job.pk}"' not in frame:
            frame = await comm.receive_from(5)
        await comm.disconnect()

    run(scenario)


def test_my_jobs_opened_empty_has_a_table_for_new_rows():
    owner = UserFactory(username="empty")
    page = Client()
    page.force_login(owner)
    html = page.get(reverse("jobs:list")).content.decode()
    assert "No jobs yet" in html and "data-live-empty" in html
    assert re.search(r'<div class="table-wrap" hidden>', html)
    assert 'id="job-rows" data-new-rows="any"' in html
