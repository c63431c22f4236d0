"""A user's own budget (issue 16): their monthly limit (at most the operator's), an alert threshold,
and the alert raised once per account and calendar month when spend passes it.

Spend is what the submit check counts (:func:`apps.metering.limits.month_spent`): the month's cost
of charged leases, a run still going with its cost so far. It moves with the clock while a run
goes, not only when a lease is released, so the alert is checked by a periodic task
(:func:`apps.metering.tasks.budget_alerts_task`, Celery beat every ``E31_BUDGET_PERIOD_S``),
never inside a request.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from apps.core import clock
from apps.core.models import AccountProfile

from .accounts import profile_of
from .days import month_start, next_month_start
from .limits import month_spent
from .models import BudgetAlert
from .signals import budget_alert_raised


@transaction.atomic
def profile_set_budget(*, owner, user_spend_limit: Decimal | None,
                       alert_threshold_percent: int | None) -> AccountProfile:
    """Store ``owner``'s own monthly limit (USD, None for none) and alert threshold (percent 1-100 of
    the effective limit, None for no alert).

    Raises:
        django.core.exceptions.ValidationError: a dict naming the field: ``user_spend_limit`` negative
            or above the operator's limit; ``alert_threshold_percent`` outside 1-100.
    """
    profile, _ = AccountProfile.objects.select_for_update().get_or_create(
        owner_id=owner.pk, defaults={"time_zone": settings.TIME_ZONE})
    errors: dict[str, list[str]] = {}
    if user_spend_limit is not None:
        if user_spend_limit < 0:
            errors["user_spend_limit"] = ["Must be 0 or more."]
        elif profile.monthly_spend_limit is not None and user_spend_limit > profile.monthly_spend_limit:
            errors["user_spend_limit"] = [
                f"Must be at most the operator's limit, ${profile.monthly_spend_limit:,}: your own limit can only "
                "lower it."]
    if alert_threshold_percent is not None and not 1 <= alert_threshold_percent <= 100:
        errors["alert_threshold_percent"] = ["Must be a whole percent from 1 to 100."]
    if errors:
        raise ValidationError(errors)
    profile.user_spend_limit = user_spend_limit
    profile.alert_threshold_percent = alert_threshold_percent
    profile.save(update_fields=["user_spend_limit", "alert_threshold_percent"])
    return profile


def _month_of(now: datetime, profile: AccountProfile) -> date:
    return now.astimezone(profile.tz).date().replace(day=1)


def threshold_amount(limit: Decimal, percent: int) -> Decimal:
    """``percent`` of ``limit`` in USD, to the cent (half up)."""
    return (limit * percent / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class BudgetBanner:
    """What the pages say while an alert stands: spend (USD) against the limit (USD) at a percent."""

    percent: int
    spent: Decimal
    limit: Decimal
    month: date
    key: str  # stable per account and month: the browser notifies once per key

    def message(self) -> str:
        return (f"Your spend this month, ${self.spent.quantize(Decimal('0.01')):,}, has passed {self.percent}% "
                f"of your monthly limit of ${self.limit:,}.")


def budget_banner_of(user, now: datetime | None = None) -> BudgetBanner | None:
    """The alert to show ``user`` on every page, or None: a :class:`BudgetAlert` of the current month
    (in the account's zone) while the account's threshold is set and not above the alert's. Two
    small queries; never writes."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    profile = profile_of(user)
    if profile.alert_threshold_percent is None:
        return None
    now = now or clock.now()
    alert = BudgetAlert.objects.filter(owner_id=user.pk, month=_month_of(now, profile),
                                       threshold_percent__gte=profile.alert_threshold_percent).first()
    if alert is None:
        return None
    return BudgetBanner(alert.threshold_percent, alert.spent, alert.limit, alert.month,
                        f"{user.pk}-{alert.month:%Y-%m}-{alert.threshold_percent}")


def budget_alert_check(profile: AccountProfile, now: datetime) -> BudgetAlert | None:
    """Raise ``profile``'s alert if the month's spend has passed its threshold; returns the alert raised
    or moved up, else None.

    Once per account and month: the first time, a :class:`BudgetAlert` is stored and
    :data:`apps.metering.signals.budget_alert_raised` sent (the e-mail); if the user has since raised
    the threshold and spend passes the new one, the row is moved up (the banner shows again) and no
    signal is sent. Spend "passes" the threshold when it is strictly above it.
    """
    limit, percent = profile.effective_spend_limit, profile.alert_threshold_percent
    if limit is None or percent is None:
        return None
    month = _month_of(now, profile)
    if BudgetAlert.objects.filter(owner_id=profile.owner_id, month=month, threshold_percent__gte=percent).exists():
        return None
    tz = profile.tz
    spent = month_spent(profile.owner, month_start(now, tz), next_month_start(now, tz), now)
    if spent <= threshold_amount(limit, percent):
        return None
    with transaction.atomic():
        alert, created = BudgetAlert.objects.select_for_update().get_or_create(
            owner_id=profile.owner_id, month=month,
            defaults={"threshold_percent": percent, "limit": limit, "spent": spent, "raised_at": now})
        if created:
            budget_alert_raised.send(sender=BudgetAlert, alert_id=alert.pk, owner_id=profile.owner_id)
        elif alert.threshold_percent < percent:
            alert.threshold_percent, alert.limit, alert.spent, alert.raised_at = percent, limit, spent, now
            alert.save(update_fields=["threshold_percent", "limit", "spent", "raised_at"])
        else:
            return None
    return alert


def budget_alert_of(alert_id: int) -> BudgetAlert | None:
    """Budget alert ``alert_id`` with its owner, or None when there is none (a stale task's id)."""
    return BudgetAlert.objects.select_related("owner").filter(pk=alert_id).first()


def budget_alerts_scan(now: datetime | None = None) -> int:
    """Check every account with an alert threshold and a limit (:func:`budget_alert_check`); returns how
    many alerts were raised or moved up. Accounts already alerted at their threshold this month cost one
    query each."""
    now = now or clock.now()
    profiles = (AccountProfile.objects.filter(alert_threshold_percent__isnull=False)
                .filter(Q(monthly_spend_limit__isnull=False) | Q(user_spend_limit__isnull=False))
                .select_related("owner").order_by("pk"))
    return sum(budget_alert_check(profile, now) is not None for profile in profiles)
