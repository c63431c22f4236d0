"""The live pool page over a WebSocket (issue 5; issue 10, item 2): ``/ws/pool/``.

Everyone signed in gets the totals and GPU models; staff also get the nodes
and the whole queue. Rendered only here, for sockets that watch, and once per
message and process for all the sockets of one kind (:data:`_rendered`).
"""
from __future__ import annotations

import threading

from apps.live.consumers.base import LiveConsumer
from apps.live.push import POOL_GROUP
from apps.web.jobs.fragments import stamp_ms
from apps.web.pool.fragments import render_pool, render_staff

_rendered: dict[tuple, str] = {}  # (version, staff, tz) -> html: shared by this process's pool sockets
_rendered_lock = threading.Lock()
RENDERED_KEEP = 8


class PoolConsumer(LiveConsumer):
    """``/ws/pool/``: free GPUs by model for everyone; nodes and queue for staff."""

    def groups_for(self, user) -> list[str] | None:
        return [POOL_GROUP]

    def snapshot(self, user) -> str:
        stamp = stamp_ms()
        return render_pool(stamp=stamp) + (render_staff(stamp=stamp) if user.is_staff else "")

    def render_change(self, user, event: dict) -> str:
        if event.get("page") != "pool":
            return ""
        key = (event.get("version"), bool(user.is_staff), str(self.tz))
        with _rendered_lock:
            html = _rendered.get(key)
            if html is None:
                html = _rendered[key] = self.snapshot(user)
                while len(_rendered) > RENDERED_KEEP:
                    _rendered.pop(next(iter(_rendered)))
        return html
