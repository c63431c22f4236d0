"""The live parts of the pool page, rendered the same way for a page load and for a push.

``pool/_live.html`` (totals and GPU models, the same for everyone) and
``pool/_staff.html`` (nodes and the whole queue, staff only) are each one
element with an id and a ``data-version`` (the server's clock in ms, taken
before the read); see :mod:`apps.web.jobs.fragments` for how versions are used.
"""
from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from apps.jobs.selectors import jobs_queued
from apps.metering.display import rate_text
from apps.metering.selectors import pool_summary
from apps.pool.selectors import nodes_overview
from apps.web.jobs.fragments import stamp_ms

STAFF_QUEUE_ROWS = 100  # the staff queue table shows the first 100 jobs in queue order


def pool_context(*, stamp: int | None = None) -> dict[str, Any]:
    """Totals and per-model rows (``total``, ``free``, ``busy``, ``nodes``, ``rate``) read now."""
    stamp = stamp_ms() if stamp is None else stamp
    rows = [{**row, "busy": row["total"] - row["free"], "rate": rate_text(row["rate_per_gpu_hour"])}
            for row in pool_summary()]
    return {"rows": rows, "total": sum(r["total"] for r in rows), "free": sum(r["free"] for r in rows),
            "queued": jobs_queued().count(), "version": str(stamp)}


def staff_context(*, stamp: int | None = None) -> dict[str, Any]:
    """Every node, and the first :data:`STAFF_QUEUE_ROWS` queued jobs of everyone (staff view)."""
    stamp = stamp_ms() if stamp is None else stamp
    return {"nodes": nodes_overview(), "queue": list(jobs_queued().select_related("owner")[:STAFF_QUEUE_ROWS]),
            "version": str(stamp)}


def render_pool(*, stamp: int | None = None) -> str:
    """The pool totals and models fragment (``<div id="pool-live">``)."""
    return render_to_string("pool/_live.html", pool_context(stamp=stamp))


def render_staff(*, stamp: int | None = None) -> str:
    """The staff fragment: nodes and queue (``<div id="pool-staff">``)."""
    return render_to_string("pool/_staff.html", staff_context(stamp=stamp))
