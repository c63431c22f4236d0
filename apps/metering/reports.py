"""The operators' report (issue 6): per local day and GPU model, GPU-hours held, idle, down
and charged, revenue, and the top accounts and projects (SPEC §9).

Definitions (GPU-hours are GPUs x hours, each span counted in each day by
its overlap, see :mod:`apps.metering.days`):

- held: every lease, from rent to release (to now while open), charged or not;
- charged: the billed span of charged leases (``rented_at`` + ``billed_seconds``);
- revenue: the cost of charged leases, shared between days by that overlap;
- down: :class:`~apps.pool.models.NodeDowntime` spans x the node's GPUs of the model;
- capacity: the GPUs of the model the pool knows now x the day's hours (up to now), each
  from its node's first registration (``Node.first_registered_at``): a day before a node
  joined counts none of its GPUs (a GPU removed since is not counted on its past days);
- idle: capacity - held - down, never below 0.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal

from django import forms
from django.db.models import Count, Q

from apps.core import clock
from apps.pool.models import Gpu, NodeDowntime

from . import billing
from .days import local_midnight, split_by_day, validate_day
from .models import Lease
from .statements import line_pieces, statement_of

REPORT_DAYS_DEFAULT = 14
REPORT_DAYS_MAX = 366
TOP_ACCOUNTS = 10
HOURS = Decimal("0.01")


class ReportFilterForm(forms.Form):
    """``?from=YYYY-MM-DD&to=YYYY-MM-DD`` (local days, both included); the last 14 days by default."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "from" is a Python keyword, hence not a class attribute.
        for name, label in (("from", "From"), ("to", "To")):
            self.fields[name] = forms.DateField(required=False, label=label, validators=[validate_day],
                                                widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        data = super().clean()
        first, last = data.get("from"), data.get("to")
        if first and last and last < first:
            self.add_error("to", "Must be on or after the first day.")
        elif first and last and (last - first).days >= REPORT_DAYS_MAX:
            self.add_error("to", f"At most {REPORT_DAYS_MAX} days at a time.")
        return data

    def span(self, tz: tzinfo, today: date | None = None) -> tuple[date, date]:
        """The first and last local day of the report."""
        today = today or clock.now().astimezone(tz).date()
        first = last = None
        if self.is_bound and self.is_valid():
            first, last = self.cleaned_data.get("from"), self.cleaned_data.get("to")
        last = last or (first + timedelta(days=REPORT_DAYS_DEFAULT - 1) if first else today)
        first = first or last - timedelta(days=REPORT_DAYS_DEFAULT - 1)
        return first, last


@dataclass
class ReportRow:
    """One local day and GPU model. GPU-hours to 2 places; revenue in USD to the cent."""

    day: date
    gpu_model: str
    gpus: int
    capacity: Decimal
    held: Decimal
    idle: Decimal
    down: Decimal
    charged: Decimal
    revenue: Decimal


@dataclass
class Account:
    """One account's share of the report's span."""

    username: str
    leases: int
    charged: Decimal
    revenue: Decimal


@dataclass
class Report:
    first: date
    last: date
    rows: list[ReportRow]
    totals: dict[str, Decimal] = field(default_factory=dict)
    top_accounts: list[Account] = field(default_factory=list)
    top_projects: list[Account] = field(default_factory=list)  # ``username`` holds the project's name


def _hours(seconds: float) -> Decimal:
    return (Decimal(str(seconds)) / Decimal(3600)).quantize(HOURS, ROUND_HALF_UP)


def _capacity_seconds(first: date, last: date, *, tz: tzinfo, now: datetime) -> dict[tuple[date, str], float]:
    """GPU-seconds of capacity per (local day, GPU model): each present GPU from its node's first
    registration to ``now``, so a day before a node joined the pool counts none of its GPUs."""
    capacity: dict[tuple[date, str], float] = defaultdict(float)
    rows = (Gpu.objects.filter(present=True, node__first_registered_at__isnull=False)
            .values_list("node__first_registered_at", "model").annotate(n=Count("id")))
    for joined, model, count in rows:
        for day, seconds in split_by_day(joined, now, tz):
            if first <= day <= last:
                capacity[day, model] += seconds * count
    return capacity


def operator_report(first: date, last: date, *, tz: tzinfo, now: datetime) -> Report:
    """The report for the local days ``first``..``last`` (both included) in ``tz``."""
    start, end = local_midnight(first, tz), local_midnight(last + timedelta(days=1), tz)
    in_range = lambda day: first <= day <= last  # noqa: E731

    held: dict[tuple[date, str], float] = defaultdict(float)
    charged: dict[tuple[date, str], float] = defaultdict(float)
    revenue: dict[tuple[date, str], Decimal] = defaultdict(Decimal)
    down: dict[tuple[date, str], float] = defaultdict(float)
    accounts: dict[str, Account] = {}
    projects: dict[str, Account] = {}

    leases = (Lease.objects.filter(rented_at__lt=end).filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
              .select_related("job__owner", "job__project", "node"))
    statement = statement_of(leases, now)
    for line in statement.lines:
        lease = line.lease
        for day, seconds in split_by_day(lease.rented_at, lease.released_at or now, tz):
            if in_range(day):
                held[day, lease.gpu_model] += seconds * lease.gpu_count
        pieces = [(d, s, c) for d, s, c in line_pieces(line, tz) if in_range(d)]
        for day, gpu_seconds, share in pieces:
            charged[day, lease.gpu_model] += gpu_seconds
            revenue[day, lease.gpu_model] += share
        if pieces:
            owner = lease.job.owner.get_username()
            project = lease.job.project.name if lease.job.project_id else f"~{owner}"
            for table, name in ((accounts, owner), (projects, project)):
                who = table.setdefault(name, Account(name, 0, Decimal(0), Decimal(0)))
                who.leases += 1
                who.charged += Decimal(str(sum(s for _, s, _ in pieces)))
                who.revenue += sum((c for _, _, c in pieces), Decimal(0))

    for span in NodeDowntime.objects.filter(down_at__lt=end).filter(Q(up_at__isnull=True) | Q(up_at__gt=start)):
        for day, seconds in split_by_day(span.down_at, span.up_at or now, tz):
            if in_range(day):
                for model, count in (span.gpus or {}).items():
                    down[day, model] += seconds * int(count)

    gpus = dict(Gpu.objects.filter(present=True).values_list("model").annotate(n=Count("id")))
    capacity_s = _capacity_seconds(first, last, tz=tz, now=now)
    models = sorted(set(gpus) | {m for _, m in held} | {m for _, m in down})
    rows = []
    day = first
    while day <= last:
        for model in models:
            key = (day, model)
            capacity = capacity_s[key]
            idle = max(0.0, capacity - held[key] - down[key])
            rows.append(ReportRow(day, model, gpus.get(model, 0), _hours(capacity), _hours(held[key]), _hours(idle),
                                  _hours(down[key]), _hours(charged[key]),
                                  revenue[key].quantize(billing.CENT, ROUND_HALF_UP)))
        day += timedelta(days=1)

    totals = {name: sum((getattr(r, name) for r in rows), Decimal(0))
              for name in ("capacity", "held", "idle", "down", "charged", "revenue")}
    for who in [*accounts.values(), *projects.values()]:
        who.charged = _hours(float(who.charged))
        who.revenue = who.revenue.quantize(billing.CENT, ROUND_HALF_UP)
    top = sorted(accounts.values(), key=lambda a: (-a.revenue, a.username))[:TOP_ACCOUNTS]
    top_projects = sorted(projects.values(), key=lambda a: (-a.revenue, a.username))[:TOP_ACCOUNTS]
    return Report(first, last, rows, totals, top, top_projects)


REPORT_CSV_COLUMNS = ["day", "gpu_model", "gpus", "capacity_gpu_hours", "held_gpu_hours", "idle_gpu_hours",
                      "down_gpu_hours", "charged_gpu_hours", "revenue"]


def report_rows(report: Report) -> list[list[str]]:
    """CSV rows (``REPORT_CSV_COLUMNS`` order): one per local day and GPU model."""
    return [[r.day.isoformat(), r.gpu_model, str(r.gpus), str(r.capacity), str(r.held), str(r.idle), str(r.down),
             str(r.charged), str(r.revenue)] for r in report.rows]
