"""Account meter settings: time zone and monthly spend limit (reads and writes)."""
from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.db import transaction

from apps.core.models import AccountProfile, validate_time_zone


def profile_of(user) -> AccountProfile:
    """The user's profile, or an unsaved default one (the site's time zone, no limit).

    Never writes: reading a page does not create rows.
    """
    profile = AccountProfile.objects.filter(owner_id=user.pk).first()
    return profile or AccountProfile(owner_id=user.pk, time_zone=settings.TIME_ZONE)


def user_tz(user) -> zoneinfo.ZoneInfo:
    """The user's time zone (the site's for anonymous users or users without a profile)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return zoneinfo.ZoneInfo(settings.TIME_ZONE)
    return profile_of(user).tz


@transaction.atomic
def profile_set_time_zone(*, owner, time_zone: str) -> AccountProfile:
    """Set the owner's time zone.

    Raises:
        django.core.exceptions.ValidationError: ``time_zone`` is not an IANA name.
    """
    validate_time_zone(time_zone)
    profile, _ = AccountProfile.objects.select_for_update().get_or_create(
        owner_id=owner.pk, defaults={"time_zone": time_zone})
    if profile.time_zone != time_zone:
        profile.time_zone = time_zone
        profile.save(update_fields=["time_zone"])
    return profile
