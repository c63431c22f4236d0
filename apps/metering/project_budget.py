"""A project's money by month (issue 25 item 3, SPEC §9): its budget alert and its statement.

The alert: once per project and month, when every
member's spend passes ``alert_percent`` of the project's limit (the lower of the operator's
``spend_limit`` and the owner's ``budget``), the project's owners and admins see a banner on every
page, and those of them with e-mail notices on get one e-mail (:data:`.signals.project_budget_alert_raised`,
sent by :mod:`apps.notices`). Checked by the same periodic task as the accounts' alerts
(:mod:`apps.metering.budget`).
"""
from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from apps.core import clock
from apps.projects.models import Membership, Project, Role

from .budget import threshold_amount
from .days import month_start, next_month_start
from .limits import month_spent_of, project_limit
from .models import ProjectBudgetAlert
from .selectors import leases_overlapping, usage_base, usage_by_member, with_line_fields
from .signals import project_budget_alert_raised
from .statements import Statement, statement_of


def _month(now: datetime) -> tuple[date, datetime, datetime]:
    tz = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    return now.astimezone(tz).date().replace(day=1), month_start(now, tz), next_month_start(now, tz)


def project_alert_check(project: Project, now: datetime) -> ProjectBudgetAlert | None:
    """Raise ``project``'s alert if the month's spend has passed its threshold (strictly above);
    the alert raised or moved up to a higher threshold, else None. The first alert of a month sends
    :data:`~.signals.project_budget_alert_raised` (the e-mail); moving it up shows the banner again
    and sends nothing, as an account's alert (:func:`~.budget.budget_alert_check`)."""
    limit = project_limit(project)
    if limit is None:
        return None
    month, start, end = _month(now)
    percent = project.alert_percent
    if ProjectBudgetAlert.objects.filter(project=project, month=month, threshold_percent__gte=percent).exists():
        return None
    spent = month_spent_of({"project_id": project.pk}, start, end, now)
    if spent <= threshold_amount(limit, percent):
        return None
    try:
        with transaction.atomic():
            alert, created = ProjectBudgetAlert.objects.select_for_update().get_or_create(
                project=project, month=month,
                defaults={"threshold_percent": percent, "limit": limit, "spent": spent, "raised_at": now})
            if created:
                project_budget_alert_raised.send(sender=ProjectBudgetAlert, alert_id=alert.pk, project_id=project.pk)
            else:
                alert.threshold_percent, alert.limit, alert.spent, alert.raised_at = percent, limit, spent, now
                alert.save(update_fields=["threshold_percent", "limit", "spent", "raised_at"])
    except IntegrityError:  # another scan made it at the same moment
        return None
    return alert


def project_budget_alert_of(alert_id: int) -> ProjectBudgetAlert | None:
    """Project budget alert ``alert_id`` with its project, or None when there is none (a stale task's id)."""
    return ProjectBudgetAlert.objects.select_related("project").filter(pk=alert_id).first()


def project_alerts_scan(now: datetime | None = None) -> int:
    """Check every project with a limit or a budget (:func:`project_alert_check`); returns how many
    alerts were raised or moved up."""
    now = now or clock.now()
    projects = Project.objects.filter(Q(spend_limit__isnull=False) | Q(budget__isnull=False)).order_by("pk")
    return sum(project_alert_check(p, now) is not None for p in projects)


@dataclass(frozen=True)
class ProjectBanner:
    """An alert standing for one of the user's projects."""

    project: str
    percent: int
    spent: Decimal
    limit: Decimal

    def message(self) -> str:
        return (f"Project {self.project}'s spend this month, ${self.spent.quantize(Decimal('0.01')):,}, has passed "
                f"{self.percent}% of its monthly limit of ${self.limit:,}.")


def project_banners_of(user, now: datetime | None = None) -> list[ProjectBanner]:
    """The alerts of this month standing for projects where ``user`` is an owner or admin (one
    query; never writes)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return []
    month = _month(now or clock.now())[0]
    managed = Membership.objects.filter(user_id=user.pk, role__in=(Role.OWNER, Role.ADMIN)).values("project_id")
    alerts = (ProjectBudgetAlert.objects.filter(month=month, project_id__in=managed)
              .select_related("project").order_by("project__name"))
    return [ProjectBanner(a.project.name, a.threshold_percent, a.spent, a.limit) for a in alerts
            if a.threshold_percent >= a.project.alert_percent]


@dataclass(frozen=True)
class ProjectStatement:
    """A project's monthly statement (issue 25 item 3): every member's leases that overlap the month
    (site time zone), each counted by its overlap, with totals and totals by member."""

    month: date
    statement: Statement
    by_member: list[dict]
    limit: Decimal | None


def month_parse(text: str | None, now: datetime) -> date:
    """The first day of month ``YYYY-MM`` (this month for None or "").

    Raises:
        ValueError: not a month in that form.
    """
    if not text:
        return _month(now)[0]
    year, _, month = text.partition("-")
    if not (year.isdigit() and month.isdigit() and len(year) == 4 and len(month) == 2):
        raise ValueError("month must be YYYY-MM")
    return date(int(year), int(month), 1)  # ValueError for month 13


def project_statement(project: Project, month: date, now: datetime | None = None) -> ProjectStatement:
    """``project``'s statement of ``month`` (the caller has checked the reader may see it)."""
    now = now or clock.now()
    tz = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    start = datetime(month.year, month.month, 1, tzinfo=tz)
    end = next_month_start(start, tz)
    leases = leases_overlapping(with_line_fields(usage_base(user=None, project=project)), start, end)
    statement = statement_of(list(leases), now, (start, end))
    return ProjectStatement(month, statement, usage_by_member(statement), project_limit(project))
