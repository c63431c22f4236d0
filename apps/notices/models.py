"""What a user wants to be told about their jobs besides the live pages (issue 5)."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class NoticePreference(models.Model):
    """One user's notice settings. No row means the defaults (no e-mail).

    Browser notifications need no row: the browser keeps the user's consent.
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                 related_name="notice_preference")
    email_on_release = models.BooleanField(
        default=False, help_text="Send an e-mail to the account's address when one of its jobs is released.")

    def __str__(self) -> str:
        return f"notices of {self.owner_id}"
