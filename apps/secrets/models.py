"""Users' secrets (issue 23): named values a job's spec names (``work.secrets``, ``data[i].credentials``).

Only the name and the Fernet token of the value are stored (:mod:`apps.secrets.crypto`); the key that
opens the tokens is not in the database. Nothing shows a value: not the API, the pages nor the admin.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"
NAME_MAX = 100
VALUE_MAX_BYTES = 64 * 1024  # a value's most UTF-8 bytes (SPEC §2)


class Secret(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="secrets",
                              help_text="Whose it is; for a project's secret, who set it last.")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="secrets", help_text=(
                                    "Set on a project's secret (SPEC §9): usable by the project's jobs only."))
    name = models.CharField(max_length=NAME_MAX)
    token = models.BinaryField(help_text="The value, encrypted (Fernet); the key is not in the database.")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], condition=models.Q(project__isnull=True),
                                    name="secret_owner_name_unique"),
            models.UniqueConstraint(fields=["project", "name"], condition=models.Q(project__isnull=False),
                                    name="secret_project_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.project or self.owner})"
