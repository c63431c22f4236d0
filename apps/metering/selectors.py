"""Reads of the meter: a user's leases and totals."""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import F, Q, QuerySet, Sum

from apps.core import clock
from apps.core.choices import NodeState
from apps.core.types import MAX_GPUS_PER_NODE, MAX_NODES, ComputeRequest
from apps.core.units import format_duration, parse_duration
from apps.pool.models import Gpu, Node

from .display import rate_text
from .models import Lease, LeaseGpu
from .pricing import lease_price, worst_case_price
from .rates import FALLBACK_RATE, current_rates
from .statements import Day, Statement, by_day, statement_of

LINE_FIELDS = ("job__name", "job__attempt", "job__state", "job__outcome", "job__owner_id", "node__name",
               "job__project__name", "job__owner__username")


def with_line_fields(leases: QuerySet[Lease]) -> QuerySet[Lease]:
    """``leases`` with what a statement line shows of their job and node, newest first (the job's
    spec, a large JSON document, is not read)."""
    lease_fields = [f.name for f in Lease._meta.concrete_fields]
    return (leases.select_related("job", "node", "job__project", "job__owner").only(*lease_fields, *LINE_FIELDS)
            .order_by("-rented_at", "-id"))


def usage_base(*, user, project=None) -> QuerySet[Lease]:
    """The leases a usage view adds up: ``user``'s own jobs' (in every project), or, with
    ``project`` (one the caller may see, checked by the caller with :mod:`apps.projects.access`),
    every member's jobs' of that project (SPEC §9)."""
    if project is not None:
        return Lease.objects.filter(job__project=project)
    return Lease.objects.filter(job__owner=user)


def leases_overlapping(leases: QuerySet[Lease], start: datetime | None, end: datetime | None) -> QuerySet[Lease]:
    """``leases`` whose hold ``[rented_at, released_at)`` (open ones: to now) overlaps ``[start, end)``."""
    if start:
        leases = leases.filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
    if end:
        leases = leases.filter(rented_at__lt=end)
    return leases


def usage_leases(*, user, start: datetime | None = None, end: datetime | None = None,
                 project=None) -> QuerySet[Lease]:
    """The user's (or ``project``'s, :func:`usage_base`) leases that overlap ``[start, end)``, newest
    first, with job and node."""
    qs = leases_overlapping(with_line_fields(usage_base(user=user, project=project)), start, end)
    return qs.order_by("-rented_at", "-id")


def lease_of_attempt(*, node: Node, job_id: int, attempt: int) -> Lease | None:
    """``node``'s lease of attempt ``attempt`` of job ``job_id`` (its job read), or None."""
    return Lease.objects.select_related("job").filter(node=node, job_id=job_id, attempt=attempt).first()


def leases_on(node: Node) -> QuerySet[Lease]:
    """Every lease of ``node``, open or released, of any attempt (callers filter further)."""
    return Lease.objects.filter(node=node)


def leases_open_on(node: Node) -> QuerySet[Lease]:
    """The leases ``node`` holds now: not released (fenced ones too), of any attempt."""
    return leases_on(node).filter(released_at__isnull=True)


def attempt_leases(*, job_id: int, attempt: int) -> list[Lease]:
    """The leases of one attempt of job ``job_id``, one per node rank, rank 0 first, each with its node."""
    return list(Lease.objects.filter(job_id=job_id, attempt=attempt).select_related("node").order_by("node_rank"))


CSV_COLUMNS = ["lease_id", "job_id", "job_name", "attempt", "node", "gpu_model", "gpu_count",
               "rented_at", "run_ended_at", "released_at", "held_seconds", "billed_seconds",
               "rate_per_gpu_hour", "cost", "charged", "end_reason", "outcome", "project", "owner"]


def usage_records(leases, tz, now: datetime | None = None) -> list[dict]:
    """One typed record per lease (keys ``CSV_COLUMNS``): ints, booleans, decimals as
    strings, times ISO 8601 with the offset of ``tz`` (None when not yet).

    A running lease (``outcome`` ``running``) has its billed seconds and cost so far.
    Accepts leases or a :class:`~apps.metering.statements.Statement`.
    """
    statement = leases if isinstance(leases, Statement) else statement_of(leases, now or clock.now())

    def iso(value: datetime | None) -> str | None:
        return value.astimezone(tz).isoformat() if value else None

    return [{
        "lease_id": line.lease.pk, "job_id": line.lease.job_id, "job_name": line.lease.job.name,
        "attempt": line.lease.attempt, "node": line.lease.node.name, "gpu_model": line.lease.gpu_model,
        "gpu_count": line.lease.gpu_count, "rented_at": iso(line.lease.rented_at),
        "run_ended_at": iso(line.lease.run_ended_at), "released_at": iso(line.lease.released_at),
        "held_seconds": line.held_seconds, "billed_seconds": line.billed_seconds,
        "rate_per_gpu_hour": str(line.lease.rate_per_gpu_hour),
        "cost": None if line.cost is None else str(line.cost), "charged": line.lease.charged,
        "end_reason": line.lease.end_reason, "outcome": line.outcome,
        "project": _project_of(line.lease.job), "owner": line.lease.job.owner.username,
    } for line in statement.lines]


def _project_of(job) -> str:
    return job.project.name if job.project_id else f"~{job.owner.username}"


def usage_by_member(statement: Statement) -> list[dict[str, Any]]:
    """A project's charged usage per member (issue 25 item 3), most cost first: ``owner``,
    ``leases``, ``billed_seconds``, ``gpu_hours_billed`` (4 places, string), ``cost`` (USD, 6
    places, string)."""
    rows: dict[str, dict[str, Any]] = {}
    for line in statement.lines:
        if not line.counts:
            continue
        row = rows.setdefault(line.lease.job.owner.username, {"leases": 0, "billed_seconds": 0, "gpu_seconds": 0,
                                                              "cost": Decimal(0)})
        row["leases"] += 1
        row["billed_seconds"] += line.billed_seconds
        row["gpu_seconds"] += line.billed_seconds * line.lease.gpu_count
        row["cost"] += line.cost
    return [{"owner": owner, "leases": r["leases"], "billed_seconds": r["billed_seconds"],
             "gpu_hours_billed": str((Decimal(r["gpu_seconds"]) / Decimal(3600)).quantize(Decimal("0.0001"))),
             "cost": f"{r['cost']:.6f}"}
            for owner, r in sorted(rows.items(), key=lambda kv: (-kv[1]["cost"], kv[0]))]


def usage_rows(leases, tz, now: datetime | None = None) -> list[list[str]]:
    """CSV rows (``CSV_COLUMNS`` order) of :func:`usage_records`; empty cells for None."""
    def cell(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        return str(value)

    return [[cell(record[key]) for key in CSV_COLUMNS] for record in usage_records(leases, tz, now)]


@dataclass(frozen=True)
class Money:
    """What a job has cost so far (SPEC §4): charged leases, plus what open runs accrue.

    ``cost`` is kept to 6 places; pages show it to the cent. ``accruing`` is
    true while a run's meter is still going (its lease has no cost yet).
    """

    cost: Decimal
    billed_seconds: int
    accruing: bool


def job_money(leases, now: datetime) -> Money:
    """Cost so far over a job's leases; an open, unpriced run is priced up to ``now``."""
    total, seconds, accruing = Decimal(0), 0, False
    for lease in leases:
        if not lease.charged:
            continue
        price = lease_price(lease, now)
        if price.cost is not None:
            total += price.cost
            seconds += price.billed_seconds or 0
            accruing = accruing or price.running
    return Money(total, seconds, accruing)


@dataclass(frozen=True)
class ArrayMoney:
    """What a job array's tasks have cost so far (SPEC §4, summed as :func:`job_money` sums a job):
    ``cost`` (USD, 6 places), ``gpu_seconds`` billed, ``accruing`` while a task's meter runs."""

    cost: Decimal
    gpu_seconds: int
    accruing: bool

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


def arrays_money(array_ids: list[int], now: datetime | None = None) -> dict[int, ArrayMoney]:
    """:class:`ArrayMoney` of each array of ``array_ids``: the ended charged leases summed by the
    database, the open ones priced up to ``now`` (default :func:`apps.core.clock.now`)."""
    now = now or clock.now()
    ended = {row["job__array_id"]: row for row in Lease.objects.filter(
        job__array_id__in=array_ids, charged=True, cost__isnull=False).values("job__array_id").annotate(
        cost_sum=Sum("cost"), gpu_seconds=Sum(F("billed_seconds") * F("gpu_count")))}
    out = {pk: ArrayMoney(Decimal((ended.get(pk) or {}).get("cost_sum") or 0),
                          int((ended.get(pk) or {}).get("gpu_seconds") or 0), False) for pk in array_ids}
    for lease in Lease.objects.filter(job__array_id__in=array_ids, charged=True, cost__isnull=True) \
            .select_related("job"):
        price = lease_price(lease, now)
        if price.cost is None:
            continue
        was = out[lease.job.array_id]
        out[lease.job.array_id] = ArrayMoney(was.cost + price.cost,
                                             was.gpu_seconds + (price.billed_seconds or 0) * lease.gpu_count,
                                             was.accruing or price.running)
    return out


# --- GPU-hours by day (the usage page's chart) ------------------------------
def gpu_hours_by_day(leases, tz, now: datetime | None = None) -> list[Day]:
    """Billed GPU-hours and cost of charged leases per local day of ``tz``, oldest first, each
    lease counted in each day by its overlap; see :func:`apps.metering.statements.by_day`."""
    return by_day(statement_of(leases, now or clock.now()), tz)


# --- rates and the price estimate (the new-job form) ------------------------
def pool_summary(now: datetime | None = None) -> list[dict[str, Any]]:
    """Per GPU model: total GPUs on nodes not down, free ones (on up nodes), rate per GPU-hour.

    Shape: ``[{"gpu_model", "total", "free", "rate_per_gpu_hour", "nodes"}]`` sorted by model.
    """
    now = now or clock.now()
    held = set(LeaseGpu.objects.filter(open=True).values_list("gpu_id", flat=True))
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"total": 0, "free": 0, "nodes": set()})
    for gpu in Gpu.objects.filter(present=True).exclude(node__state=NodeState.DOWN).select_related("node"):
        row = rows[gpu.model]
        row["total"] += 1
        row["nodes"].add(gpu.node.name)
        if gpu.pk not in held and gpu.node.state == NodeState.UP:
            row["free"] += 1
    rates = current_rates(now)
    return [
        {"gpu_model": model, "total": r["total"], "free": r["free"], "nodes": len(r["nodes"]),
         "rate_per_gpu_hour": rates.get(model, FALLBACK_RATE)}
        for model, r in sorted(rows.items())
    ]


def rate_table(now: datetime | None = None) -> list[dict[str, Any]]:
    """Every GPU model with a rate or in the pool: rate per GPU-hour and GPUs total/free.

    Shape: ``[{"gpu_model", "rate_per_gpu_hour", "rate" (text), "total", "free"}]`` sorted by model.
    """
    now = now or clock.now()
    rates = current_rates(now)
    pool = {row["gpu_model"]: row for row in pool_summary(now)}
    return [
        {"gpu_model": model, "rate_per_gpu_hour": rates.get(model, FALLBACK_RATE),
         "rate": rate_text(rates.get(model, FALLBACK_RATE)),
         "total": pool.get(model, {}).get("total", 0), "free": pool.get(model, {}).get("free", 0)}
        for model in sorted(set(rates) | set(pool))
    ]


@dataclass(frozen=True)
class Estimate:
    """The most a job can cost on each GPU model it accepts (SPEC §4: time limit x GPUs x rate)."""

    gpus: int
    time_limit: str
    rows: list[dict[str, Any]]
    request: ComputeRequest | None = None  # what was priced (GPUs per node, nodes, models, limit)


def price_estimate(compute: Any, now: datetime | None = None) -> Estimate | None:
    """Worst-case cost per accepted model for a compute part, or None if it is not complete
    (:func:`~apps.metering.pricing.worst_case_price`'s ``by_model``, to the cent).

    ``compute`` is a spec's compute part, or the form's inputs as typed (text).
    ``rows`` are :func:`rate_table` rows with ``worst_case`` (a Decimal to the cent) and
    ``enough`` (the pool has at least the GPUs asked, summed over its nodes) added, for the
    models ``compute.gpu_model`` accepts (all when none is named) that the pool holds at least
    one GPU of: a model with a rate but no GPU is never quoted.
    """
    if not isinstance(compute, Mapping):
        return None
    gpus, nodes = compute.get("gpus"), compute.get("nodes", 1)
    if isinstance(gpus, str):
        gpus = _typed_int(gpus)
    if isinstance(nodes, str):
        nodes = _typed_int(nodes) if nodes.strip() else 1
    if type(gpus) is not int or type(nodes) is not int or not (1 <= gpus <= MAX_GPUS_PER_NODE) \
            or not (1 <= nodes <= MAX_NODES):
        return None  # the validator names the field; no price for what no spec may ask
    try:
        seconds = parse_duration(compute.get("time_limit"))
    except (TypeError, ValueError, AttributeError):
        return None
    wanted = compute.get("gpu_model") or []
    if isinstance(wanted, str):
        wanted = [part.strip() for part in re.split(r"[\n,]", wanted) if part.strip()]
    wanted = [w for w in wanted if isinstance(w, str)] if isinstance(wanted, list) else []
    request = ComputeRequest(gpus=gpus, nodes=nodes, gpu_models=tuple(wanted), time_limit_s=seconds)
    # a model with a rate but no GPU in the pool is nothing this job could run on: not quoted
    rows = [{**row, "worst_case": worst.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP),
             "enough": row["total"] >= gpus * nodes}
            for row, worst in worst_case_price(request, rate_table(now)).by_model]
    return Estimate(gpus=gpus * nodes, time_limit=format_duration(seconds), rows=rows, request=request)


def _typed_int(text: str) -> Any:
    """``" 4 "`` -> 4; any other text is returned as it is (and is then not a count)."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text
