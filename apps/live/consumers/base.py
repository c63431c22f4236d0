"""WebSocket consumers shared by the site: the live-page base and the refusal of unknown paths."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer
from django.conf import settings
from django.utils import timezone

from apps.live import seq as live_seq
from apps.metering.accounts import user_tz
from apps.web.jobs.fragments import render_log_chunk, stamp_ms

log = logging.getLogger(__name__)

SNAPSHOT_MIN_INTERVAL_S = 1.0  # a client asking faster gets one snapshot a second, the last one late
MAX_CLIENT_MESSAGE = 1024  # bytes; clients only ever send {"snapshot": true}


class RefuseConsumer(WebsocketConsumer):
    """Closes every connection at once, sending no data (an unknown path)."""

    def connect(self) -> None:
        self.close()


class LiveConsumer(AsyncWebsocketConsumer):
    """A live page: authorise, join groups, send a full snapshot, then render what changes.

    Subclasses give :meth:`groups_for` (the groups this user may watch here,
    or None to refuse), :meth:`snapshot` (the page's fragments as they are
    now, as HTML) and :meth:`render_change` (the fragments a ``live.changed``
    message calls for, read and rendered here, in the process holding the
    socket: a page nobody watches is never rendered). The groups are joined
    *before* the snapshot is read, so no change falls between the two; a
    message older than the snapshot (its version, the sender's clock at the
    change, is below the stamp taken before the snapshot's read) is skipped,
    and a fragment older than the one shown is dropped by the client's
    version check (static/js/live.js). Times are shown in the user's time
    zone, read once per snapshot (not per job or per push).

    Refusals (anonymous, someone else's job, a path that does not parse)
    close before the handshake completes: the client gets no data at all.
    The client may send ``{"snapshot": true}`` (it missed a log chunk, or its
    tab was hidden); that re-joins the groups, which also renews their
    expiry, and sends a new snapshot, at most one a second: requests that
    come faster are answered together by one snapshot when the second is up.

    Converging (issue 12 item 7): every frame says which group messages it
    answers, as ``<template data-live=... data-live-seqs="group:n ...">``:
    ``snapshot`` (the groups' numbers read before the snapshot's read: it
    shows every change numbered up to them), ``seq`` (one message, forwarded
    even when it renders nothing) and ``beat`` (every ``E31_LIVE_HEARTBEAT_S``:
    the groups' numbers now). The page asks for a snapshot when a number is
    missing, or when the socket stays silent (static/js/live.js). The beat
    also re-joins the groups every ``E31_LIVE_GROUP_RENEW_S`` (at most half
    the channel layer's group expiry), so a page open for days still hears.
    """

    joined: list[str]

    async def connect(self) -> None:
        self.joined = []
        self.last_snapshot = 0.0
        self.snapshot_stamp = 0
        self.tz = None
        self.snapshot_due: asyncio.Task | None = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        groups = await database_sync_to_async(self.groups_for)(user, **self.scope["url_route"]["kwargs"])
        if groups is None:
            await self.close()
            return
        self.joined = groups
        await self._join()
        await self.accept()
        await self._send_snapshot()
        self.beat_task = asyncio.create_task(self._beat())

    async def disconnect(self, code: int) -> None:
        if self.snapshot_due:
            self.snapshot_due.cancel()
        if getattr(self, "beat_task", None):
            self.beat_task.cancel()
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not text_data or len(text_data) > MAX_CLIENT_MESSAGE:
            return
        try:
            wants = json.loads(text_data).get("snapshot") is True
        except (ValueError, AttributeError):
            return
        if not wants or (self.snapshot_due and not self.snapshot_due.done()):
            return
        wait = self.last_snapshot + SNAPSHOT_MIN_INTERVAL_S - time.monotonic()
        if wait <= 0:
            await self._join()
            await self._send_snapshot()
        else:
            self.snapshot_due = asyncio.create_task(self._snapshot_later(wait))

    def _snapshot_local(self, user, **kwargs) -> str:
        """:meth:`snapshot` with times in the user's own time zone (read again now), as their pages show them."""
        self.snapshot_stamp = stamp_ms()
        self.tz = user_tz(user)
        with timezone.override(self.tz):
            return self.snapshot(user, **kwargs)

    def _render_local(self, user, event: dict, **kwargs) -> str:
        with timezone.override(self.tz or user_tz(user)):
            return self.render_change(user, event, **kwargs)

    async def _snapshot_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        await self._join()
        await self._send_snapshot()

    async def live_html(self, event: dict) -> None:
        """Fragments rendered by the sender: forwarded as they are."""
        await self.send(text_data=event["html"])

    async def live_changed(self, event: dict) -> None:
        """A change message from :mod:`apps.live.push`: render what it calls for and send it, after
        its number (sent alone when there is nothing to render, so the page sees no gap)."""
        mark = _seq_mark(event)
        html = ""
        if event.get("version", 0) >= self.snapshot_stamp:  # else the snapshot shows it already
            html = await database_sync_to_async(self._render_local)(self.scope["user"], event,
                                                                    **self.scope["url_route"]["kwargs"])
        if mark or html:
            await self.send(text_data=mark + html)

    async def live_log(self, event: dict) -> None:
        """New log bytes (:func:`apps.live.push.log_chunk_added`): rendered here, no database read."""
        await self.send(text_data=_seq_mark(event) + render_log_chunk(
            event["job"], attempt=event["attempt"], offset=event["offset"], data=event["data"],
            version=event["version"], stream=event.get("stream") or "combined", at=event.get("at")))

    async def _seqs(self) -> dict[str, int] | None:
        """The joined groups' message numbers now; None when the counter cannot be read."""
        try:
            return await live_seq.counter(self.channel_layer).current(self.joined)
        except Exception:
            log.warning("could not read live message numbers", exc_info=True)
            return None

    def _mark(self, kind: str, seqs: dict[str, int] | None) -> str:
        if seqs is None:
            return ""
        return (f'<template data-live="{kind}" data-live-seqs="{live_seq.seqs_attr(seqs)}" '
                f'data-live-beat-s="{settings.E31_LIVE_HEARTBEAT_S:g}"></template>')

    def renew_every_s(self) -> float:
        """How often the groups are joined again: ``E31_LIVE_GROUP_RENEW_S``, at most half the
        layer's group expiry (channels-redis drops members not re-added within it)."""
        expiry = getattr(self.channel_layer, "group_expiry", None) or 86400
        return max(0.1, min(settings.E31_LIVE_GROUP_RENEW_S, expiry / 2))

    async def _beat(self) -> None:
        """Every ``E31_LIVE_HEARTBEAT_S``: re-join the groups when due, then send the numbers now."""
        renewed = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(settings.E31_LIVE_HEARTBEAT_S)
                try:
                    if time.monotonic() - renewed >= self.renew_every_s():
                        await self._join()
                        renewed = time.monotonic()
                    mark = self._mark("beat", await self._seqs())
                    await self.send(text_data=mark or '<template data-live="beat"></template>')
                except Exception:
                    log.debug("live heartbeat failed", exc_info=True)

    async def _join(self) -> None:
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def _send_snapshot(self) -> None:
        self.last_snapshot = time.monotonic()
        seqs = await self._seqs()  # read before the snapshot: it shows every change numbered so far
        html = await database_sync_to_async(self._snapshot_local)(self.scope["user"],
                                                                 **self.scope["url_route"]["kwargs"])
        await self.send(text_data=self._mark("snapshot", seqs) + html)

    # --- for subclasses (run in a thread, may read the database) ---
    def groups_for(self, user, **kwargs: str) -> list[str] | None:
        """The groups ``user`` may join on this path, or None to refuse the socket."""
        raise NotImplementedError

    def snapshot(self, user, **kwargs: str) -> str:
        """The page's live fragments as they are now (HTML)."""
        raise NotImplementedError

    def render_change(self, user, event: dict, **kwargs: str) -> str:
        """The fragments ``event`` (``{"page", "id", "version", ...}``) calls for, as they are now; "" for none."""
        return ""


def _seq_mark(event: dict) -> str:
    """The frame's marker for one numbered group message; "" for an unnumbered one."""
    if event.get("seq") is None or not event.get("group"):
        return ""
    return f'<template data-live="seq" data-live-seqs="{event["group"]}:{int(event["seq"])}"></template>'
