"""Projects: the team a job, an array, a secret and a budget belong to (SPEC §9, issue 25).

Every user has a personal project (:attr:`Project.personal_of`), made when first needed
(:func:`apps.projects.services.personal_project`), where they are the only owner. Any user makes more
and adds members with a role (:class:`Role`); what each role may do is :mod:`apps.projects.access`,
the one place that decides it. A service token (issue 25 item 5) acts through a bot user that is a
member with the token's role (:attr:`Membership.service`), as GitLab's project access tokens do.
"""
from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
NAME_RULE = "1-63 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter or a digit"


class Role(models.TextChoices):
    """A member's role, most rights first (SPEC §9 has the table)."""

    OWNER = "owner", "owner"
    ADMIN = "admin", "admin"
    MEMBER = "member", "member"
    VIEWER = "viewer", "viewer"


class Project(models.Model):
    """A named team. ``share`` weighs its fair share against other projects (Slurm's account
    ``Fairshare``, fair-tree); ``spend_limit`` is the operator's monthly cap in the site's currency
    and ``budget`` the owner's lower one, with an alert at ``alert_percent`` of the lower of the two."""

    name = models.CharField(max_length=63, unique=True, validators=[RegexValidator(NAME_PATTERN, NAME_RULE)])
    personal_of = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="personal_project",
                                       help_text="Set on a user's personal project; it cannot be shared.")
    share = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)], help_text=(
        "Fair-share weight against other projects (Slurm's Fairshare); 0 runs only when nobody else waits."))
    spend_limit = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True, help_text=(
        "Operator's monthly spend limit for the whole project; empty: none."))
    budget = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True, help_text=(
        "Owner's monthly budget (at most the spend limit); empty: none."))
    alert_percent = models.PositiveSmallIntegerField(default=80, help_text=(
        "Alert the owners when the month's spend passes this percent of the lower of limit and budget."))
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_personal(self) -> bool:
        """True for a user's personal project."""
        return self.personal_of_id is not None


class Membership(models.Model):
    """``user`` is in ``project`` with ``role``; ``share`` weighs the user within the project
    (fair-tree's second level)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices)
    share = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)],
                              help_text="Fair-share weight of this member within the project.")
    service = models.BooleanField(default=False, help_text="A service token's bot user (issue 25 item 5).")
    added_at = models.DateTimeField()

    class Meta:
        ordering = ["project", "user__username"]
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_project_user_unique")]
        indexes = [models.Index(fields=["user", "project"])]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
