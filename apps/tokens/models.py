"""Users' API tokens, stored hashed (issue 11).

DRF's ``authtoken`` kept each key in plain text, so a database read (or an
admin page) gave away every user's API access. Here only the key's SHA-256 is
kept, with its first characters (``prefix``) to tell tokens apart; the key
itself is shown once, when issued (``manage.py issue_token``). A key is 40
random hex characters (160 bits), so a plain, unsalted SHA-256 is safe: there is
nothing to guess from a dictionary.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

PREFIX_LEN = 8
NAME_MAX = 100


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key, hex.")
    prefix = models.CharField(max_length=PREFIX_LEN, help_text="The key's first characters, to tell tokens apart.")
    name = models.CharField(max_length=NAME_MAX, blank=True, default="",
                            help_text="The user's label for the token (e.g. \"laptop\").")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True,
                                        help_text="When it last authenticated a request (to the minute), or never.")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="service_tokens", help_text=(
                                    "Set on a service token (issue 25 item 5): it acts for this project through "
                                    "its own bot user (``user``), a member with the token's role."))

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
