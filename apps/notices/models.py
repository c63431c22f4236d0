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
    email_on_since = models.DateTimeField(
        null=True, blank=True,
        help_text="When e-mail was last turned on (empty: not known). The notice reconcile sends late "
                  "release e-mails only for jobs released since.")

    def __str__(self) -> str:
        return f"notices of {self.owner_id}"


class NoticeSent(models.Model):
    """A notice of one kind went out for one job: the claim that makes sending happen once.

    The row is inserted in the same transaction that sends the mail, so a
    task delivered twice (acks_late, a visibility timeout) blocks on the
    unique index until the first delivery commits, then finds the row and
    sends nothing; a send that fails rolls the claim back for a retry.
    """

    class Kind(models.TextChoices):
        RELEASE_EMAIL = "release_email", "e-mail on release"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="notices_sent")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "kind"], name="one_notice_per_job_and_kind")]

    def __str__(self) -> str:
        return f"{self.kind} for job {self.job_id}"


class BudgetNoticeSent(models.Model):
    """The budget alert e-mail went out for one account and calendar month (issue 16): the claim that
    makes it happen once, inserted in the sending transaction as :class:`NoticeSent` is.

    ``month`` is the first day of the month in the account's zone (the alert's
    :attr:`apps.metering.models.BudgetAlert.month`).
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget_notices_sent")
    month = models.DateField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "month"], name="one_budget_notice_per_month")]

    def __str__(self) -> str:
        return f"budget e-mail {self.month:%Y-%m} to {self.owner_id}"


class ProjectBudgetNoticeSent(models.Model):
    """A project's budget alert e-mail went out to one of its owners or admins for one calendar month
    (issue 25 item 3): the claim that makes it happen once per recipient, inserted in the sending
    transaction as :class:`BudgetNoticeSent` is. ``month`` is the alert's
    (:attr:`apps.metering.models.ProjectBudgetAlert.month`, the site's time zone)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="budget_notices_sent")
    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                  related_name="project_budget_notices_sent")
    month = models.DateField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "recipient", "month"],
                                               name="one_project_budget_notice_per_recipient_month")]

    def __str__(self) -> str:
        return f"project {self.project_id} budget e-mail {self.month:%Y-%m} to {self.recipient_id}"
