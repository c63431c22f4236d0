"""Account settings every layer reads: the account's time zone and monthly spend limit."""
from __future__ import annotations

import zoneinfo

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
    limit in the admin; users pick their time zone on the settings page.
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                 related_name="account_profile")
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone],
                                 help_text="IANA name, e.g. Europe/Berlin. Days and months are counted in it.")
    monthly_spend_limit = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="USD per calendar month (in the account's time zone); empty for no limit. A job whose "
                  "worst case exceeds what is left is refused at submit; running jobs are never stopped.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(monthly_spend_limit__isnull=True) | Q(monthly_spend_limit__gte=0),
                                   name="account_spend_limit_not_negative"),
        ]

    def __str__(self) -> str:
        return f"profile of {self.owner_id} ({self.time_zone})"

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        """The profile's zone; UTC if the stored name is unknown to this machine."""
        try:
            return zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return zoneinfo.ZoneInfo("UTC")
