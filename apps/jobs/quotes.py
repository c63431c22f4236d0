"""A priced dry run of a submit: validate the spec, price its worst case, check the spend limit."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from apps.artifacts.models import Upload
from apps.core import clock
from apps.metering.limits import spend_check
from apps.metering.pricing import worst_case_price
from apps.metering.selectors import price_estimate, rate_table

from .services.submit import spec_validate
from .spec import compute_request


def _money(amount) -> str | None:
    return None if amount is None else f"{amount:.2f}"


def job_quote(*, owner, document: Any, attachment_names: Iterable[str] = (),
              now: datetime | None = None) -> dict[str, Any]:
    """What ``POST /api/v1/jobs/?dry_run=1`` answers: the spec checked as a submit would check it,
    nothing stored (files sent along are only counted by name).

    Returns (amounts in USD as strings, 2 places)::

        {"dry_run": true, "valid": true, "worst_case": "12.34", "gpus": 2, "time_limit": "1h", "tasks": 1,
         "by_model": [{"gpu_model", "rate_per_gpu_hour", "worst_case"}],
         "spend_limit": {"limit", "spent", "committed", "left", "fits", "shortfall", "month_start"}}

    ``worst_case`` is time limit x GPUs x the highest rate of the accepted models, times
    ``tasks`` (the spec's ``array``, else 1); ``by_model`` is per task.

    Raises:
        apps.jobs.spec.SpecError: the spec is invalid (the same errors a submit gives).
    """
    now = now or clock.now()
    attachments = {name: Upload(owner=owner, name=name) for name in attachment_names}
    spec = spec_validate(document, owner=owner, attachments=attachments)
    compute = spec.compute.model_dump(mode="json")
    estimate = price_estimate(compute, now)
    tasks = spec.array or 1  # a job array's worst case is N times one task's
    table = rate_table(now)
    worst = worst_case_price(compute_request(compute), table, tasks=tasks).amount
    check = spend_check(owner=owner, worst_case=worst, now=now, figures=True, table=table)
    return {
        "dry_run": True, "valid": True, "worst_case": _money(worst), "gpus": estimate.gpus,
        "time_limit": estimate.time_limit, "tasks": tasks,
        "by_model": [{"gpu_model": row["gpu_model"], "rate_per_gpu_hour": str(row["rate_per_gpu_hour"]),
                      "worst_case": _money(row["worst_case"])} for row in estimate.rows],
        "spend_limit": {
            "limit": _money(check.limit), "spent": _money(check.spent), "committed": _money(check.committed),
            "left": _money(check.left), "fits": check.fits, "shortfall": _money(check.shortfall),
            "month_start": check.month_start.isoformat(),
        },
    }
