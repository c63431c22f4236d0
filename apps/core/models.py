"""Account settings every layer reads: the account's time zone and monthly spend limit."""
from __future__ import annotations

import zoneinfo
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q


def validate_time_zone(value: str) -> None:
    """Raise :class:`ValidationError` unless ``value`` is an IANA time zone name (``Europe/Berlin``)."""
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value!r} is not a time zone name such as Europe/Berlin or UTC.")


class AccountProfile(models.Model):
    """An account's meter settings: its time zone and its monthly spend limit (SPEC §4).

    ``time_zone`` decides the user's days (usage chart, date filters) and the
    calendar month a spend limit counts in. ``monthly_spend_limit`` is in USD
    per calendar month of that zone; null means no limit. Operators set the
    limit in the admin; users pick their time zone on the settings page, and may set
    their own lower limit (``user_spend_limit``) and an alert threshold (issue 16).
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                 related_name="account_profile")
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone],
                                 help_text="IANA name, e.g. Europe/Berlin. Days and months are counted in it.")
    monthly_spend_limit = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="USD per calendar month (in the account's time zone); empty for no limit. A job whose "
                  "worst case exceeds what is left is refused at submit; running jobs are never stopped.")
    user_spend_limit = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="USD per calendar month, set by the user; it can only lower the operator's limit "
                  "(the smaller of the two counts). Empty for none.")
    alert_threshold_percent = models.PositiveSmallIntegerField(
        null=True, blank=True,
        help_text="Percent (1-100) of the effective monthly limit; when the month's spend passes it the "
                  "user is alerted once that month. Empty for no alert.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(monthly_spend_limit__isnull=True) | Q(monthly_spend_limit__gte=0),
                                   name="account_spend_limit_not_negative"),
            models.CheckConstraint(condition=Q(user_spend_limit__isnull=True) | Q(user_spend_limit__gte=0),
                                   name="account_user_spend_limit_not_negative"),
            models.CheckConstraint(condition=Q(alert_threshold_percent__isnull=True)
                                   | Q(alert_threshold_percent__gte=1, alert_threshold_percent__lte=100),
                                   name="account_alert_threshold_1_to_100"),
        ]

    def __str__(self) -> str:
        return f"profile of {self.owner_id} ({self.time_zone})"

    @property
    def effective_spend_limit(self) -> Decimal | None:
        """The limit that counts (USD per calendar month): the smaller of the operator's
        ``monthly_spend_limit`` and the user's own ``user_spend_limit``; None when neither is set."""
        limits = [x for x in (self.monthly_spend_limit, self.user_spend_limit) if x is not None]
        return min(limits) if limits else None

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        """The profile's zone; UTC if the stored name is unknown to this machine."""
        try:
            return zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return zoneinfo.ZoneInfo("UTC")
