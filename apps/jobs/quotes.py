"""A priced dry run of a submit: validate the spec, price its worst case, check the spend limit,
and quote when it would start on each GPU model it accepts (issue 29 item 4)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from apps.artifacts.models import Upload
from apps.core import clock
from apps.core.types import ComputeRequest
from apps.metering.limits import SpendCheck, project_limit, project_spend_check, spend_check
from apps.metering.pricing import worst_case_price
from apps.metering.selectors import price_estimate, rate_table
from apps.projects.models import Project
from apps.scheduling.adapter import start_quotes

from .services.submit import spec_validate
from .spec import compute_request, requirement_columns


def _money(amount) -> str | None:
    return None if amount is None else f"{amount:.2f}"


@dataclass(frozen=True)
class QuotedJob:
    """The requirement columns of a spec not yet submitted (``apps.scheduling.core.requests.Requirements``)."""

    gpus_per_node: int
    nodes: int
    time_limit_s: int
    gpu_models: tuple[str, ...]
    gpu_memory_mib: int
    cpus: int
    memory_mib: int
    needs_runtime: bool
    mixed_models: bool
    priority_boost: int = 0


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def model_quotes(*, owner, request: ComputeRequest, by_model: list[dict[str, Any]], needs_runtime: bool = False,
                 mixed_models: bool = False, project_id: int | None = None,
                 now: datetime | None = None) -> list[dict[str, Any]]:
    """One quote per GPU model of ``by_model`` (the models the job accepts that the pool has, with
    their worst case: :func:`apps.metering.selectors.price_estimate`'s rows): the likely start and
    the "no later than" bound the scheduler would give ``request`` on that model alone if it were
    sent now by ``owner`` in ``project_id`` (None: their personal project; the fair share is the
    owner's in that project), :func:`apps.scheduling.adapter.start_quotes`. Shape: ``[{"gpu_model",
    "estimated_start_at", "latest_start_at", "worst_case"}]`` (ISO 8601, USD per task), soonest
    likely start first, a model it could never start on last.
    """
    base = QuotedJob(gpus_per_node=request.gpus, nodes=request.nodes, time_limit_s=request.time_limit_s,
                     gpu_models=(), gpu_memory_mib=request.gpu_memory_mib, cpus=request.cpus,
                     memory_mib=request.memory_mib, needs_runtime=needs_runtime, mixed_models=mixed_models)
    variants = [replace(base, gpu_models=(row["gpu_model"],)) for row in by_model]
    starts = start_quotes(variants, owner_id=owner.pk, now=now, project_id=project_id)
    quotes = [{"gpu_model": row["gpu_model"], "estimated_start_at": _iso(likely), "latest_start_at": _iso(latest),
               "worst_case": _money(row["worst_case"])} for row, (likely, latest) in zip(by_model, starts, strict=True)]
    return sorted(quotes, key=lambda q: (q["estimated_start_at"] is None, q["estimated_start_at"] or ""))


def job_quote(*, owner, document: Any, attachment_names: Iterable[str] = (),
              now: datetime | None = None) -> dict[str, Any]:
    """What ``POST /api/v1/jobs/?dry_run=1`` answers: the spec checked as a submit would check it,
    nothing stored (files sent along are only counted by name).

    Returns (amounts in USD as strings, 2 places)::

        {"dry_run": true, "valid": true, "worst_case": "12.34", "gpus": 2, "time_limit": "1h", "tasks": 1,
         "by_model": [{"gpu_model", "rate_per_gpu_hour", "worst_case"}],
         "spend_limit": {"limit", "spent", "committed", "left", "fits", "shortfall", "month_start"},
         "quotes": [{"gpu_model", "estimated_start_at", "latest_start_at", "worst_case"}]}

    ``worst_case`` is time limit x GPUs x the highest rate of the accepted models, times
    ``tasks`` (the spec's ``array``, else 1); ``by_model`` is per task; ``quotes`` (issue 29 item
    4): per model the job could run on, when it would likely start and start at the latest if sent
    now, and its worst case there (per task), soonest first (:func:`model_quotes`).

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
    check = _binding(spend_check(owner=owner, worst_case=worst, now=now, figures=True, table=table),
                     _project_check(spec._project, worst, now, table))
    columns = requirement_columns(spec.model_dump(mode="json"))
    return {
        "dry_run": True, "valid": True, "worst_case": _money(worst), "gpus": estimate.gpus,
        "time_limit": estimate.time_limit, "tasks": tasks,
        "by_model": [{"gpu_model": row["gpu_model"], "rate_per_gpu_hour": str(row["rate_per_gpu_hour"]),
                      "worst_case": _money(row["worst_case"])} for row in estimate.rows],
        "spend_limit": {
            "limit": _money(check.limit), "spent": _money(check.spent), "committed": _money(check.committed),
            "left": _money(check.left), "fits": check.fits, "shortfall": _money(check.shortfall),
            "month_start": check.month_start.isoformat(), "project": check.project or None,
        },
        "quotes": model_quotes(owner=owner, request=compute_request(compute), by_model=estimate.rows,
                               needs_runtime=columns["needs_runtime"], mixed_models=columns["mixed_models"],
                               project_id=spec._project_id, now=now),
    }


def _project_check(project: Project | None, worst, now, table) -> SpendCheck | None:
    if project is None or project_limit(project) is None:
        return None
    return project_spend_check(project=project, worst_case=worst, now=now, table=table)


def _binding(account: SpendCheck, project: SpendCheck | None) -> SpendCheck:
    """The limit that binds a submit (the one the answer shows): one the job does not fit (both: the
    larger shortfall), else the one with less left (the account's when the project has none)."""
    if project is None:
        return account
    if account.fits != project.fits:
        return project if account.fits else account
    if not account.fits:
        return project if project.shortfall > account.shortfall else account
    if account.left is None:
        return project
    return project if project.left is not None and project.left < account.left else account
