"""Browser page of the pool (SPEC §7): GPU models with total, free and rate; nodes for staff."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.jobs.selectors import jobs_queued
from apps.metering.display import rate_text

from .selectors import nodes_overview, pool_summary


@login_required
@require_GET
def pool(request: HttpRequest) -> HttpResponse:
    """GPU models: total, free, nodes, rate per GPU-hour; staff also see every node."""
    rows = [{**row, "busy": row["total"] - row["free"], "rate": rate_text(row["rate_per_gpu_hour"])}
            for row in pool_summary()]
    return render(request, "pool/summary.html", {
        "section": "pool", "rows": rows,
        "total": sum(r["total"] for r in rows), "free": sum(r["free"] for r in rows),
        "queued": jobs_queued().count(),
        "nodes": nodes_overview() if request.user.is_staff else None,
    })
