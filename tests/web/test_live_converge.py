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

from apps.jobs import live
from apps.jobs.services import job_cancel
from apps.pool.choices import NodeState
from apps.pool.models import Node

from .factories import UserFactory, queued_job
from .test_live_consumers import communicator, content, cookie_of, db, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90), pytest.mark.usefixtures("node")]
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
    Node.objects.update(state=NodeState.DOWN)


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
        got = []
        while len(got) < 3:
            frame = await comm.receive_from(5)
            got += [n[group] for kind, n in numbers(frame) if kind == "seq"]
        assert got == [start[group] + 1, start[group] + 2, start[group] + 3]  # no gap, in order
        beat = None
        while beat is None:  # the heartbeat names the same last number
            beat = next((n for kind, n in numbers(await comm.receive_from(5)) if kind == "beat"), None)
        assert beat[group] == got[-1]
        await comm.disconnect()

    run(scenario)


def test_a_full_channel_drops_the_release_and_the_page_notices(small_channels):
    """The issue's case: 300 changes to a socket that does not read; 100 fit in its channel, the
    rest, the release among them, are dropped. The numbers show the gap; the snapshot the page
    asks for shows the job released."""
    owner = UserFactory(username="flooded")
    hold_queue()
    job = queued_job(owner, name="flooded")

    async def scenario():
        comm = communicator(f"/ws/jobs/{job.pk}/", await db(cookie_of, owner))
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from(5)
        assert 'data-job-state="queued"' in snapshot
        group = f"user-{owner.pk}"

        def flood() -> None:
            layer = get_channel_layer()
            for _ in range(300):
                async_to_sync(live.send_numbered)(layer, group, {"type": live.MESSAGE_TYPE, "page": "user",
                                                                 "id": owner.pk, "jobs": [job.pk],
                                                                 "version": live.stamp_ms()})
            job_cancel(job=job)  # released; its message finds the channel full
            time.sleep(live.COALESCE_S + 0.2)
        thread = threading.Thread(target=flood)
        thread.start()
        thread.join()  # this loop (the consumer's) is blocked meanwhile: the socket reads nothing
        seen, last, told, released = 0, 0, 0, False
        while not await comm.receive_nothing(1.0):
            frame = await comm.receive_from(5)
            for kind, n in numbers(frame):
                if kind == "seq":
                    seen, last = seen + 1, max(last, n[group])
                elif kind == "beat":
                    told = max(told, n[group])
            released = released or 'data-job-state="released"' in content(frame)
            if told:
                break
        assert 90 <= seen <= 110, seen  # about the channel's capacity of the 301 sent
        assert not released  # the page alone would stay "queued" forever
        assert told > last  # the heartbeat names numbers the page never got: it asks for a snapshot
        await comm.send_to(text_data='{"snapshot": true}')
        while True:
            frame = await comm.receive_from(5)
            if any(kind == "snapshot" for kind, _ in numbers(frame)):
                break
        assert 'data-job-state="released"' in frame
        assert dict(numbers(frame))["snapshot"][group] >= told
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
    html = page.get("/jobs/").content.decode()
    assert "No jobs yet" in html and "data-live-empty" in html
    assert re.search(r'<div class="table-wrap" hidden>', html)
    assert 'id="job-rows" data-new-rows="any"' in html
