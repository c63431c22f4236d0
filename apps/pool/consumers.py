"""The live pool page over a WebSocket (issue 5): ``/ws/pool/``.

Everyone signed in gets the totals and GPU models; staff also get the nodes
and the whole queue (the ``pool-staff`` group and fragment).
"""
from __future__ import annotations

from apps.jobs.fragments import stamp_ms
from apps.jobs.live import POOL_GROUP, POOL_STAFF_GROUP
from e31site.consumers import LiveConsumer

from .fragments import render_pool, render_staff


class PoolConsumer(LiveConsumer):
    """``/ws/pool/``: free GPUs by model for everyone; nodes and queue for staff."""

    def groups_for(self, user) -> list[str] | None:
        return [POOL_GROUP, POOL_STAFF_GROUP] if user.is_staff else [POOL_GROUP]

    def snapshot(self, user) -> str:
        stamp = stamp_ms()
        return render_pool(stamp=stamp) + (render_staff(stamp=stamp) if user.is_staff else "")
