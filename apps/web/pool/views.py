"""Browser page of the pool (SPEC §7): GPU models with total, free and rate; nodes and queue for staff."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.web.jobs.fragments import stamp_ms
from apps.web.pool.fragments import pool_context, staff_context


@login_required
@require_GET
def pool(request: HttpRequest) -> HttpResponse:
    """GPU models: total, free, nodes, rate per GPU-hour; staff also see every node and the queue."""
    stamp = stamp_ms()
    return render(request, "pool/summary.html", {
        "section": "pool", **pool_context(stamp=stamp),
        "staff": staff_context(stamp=stamp) if request.user.is_staff else None,
    })
