"""The meter: GPU rates and leases (SPEC §4)."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.core.choices import LeaseState


class GpuRate(models.Model):
    """Price of one GPU-hour of ``gpu_model`` from ``valid_from`` on, in USD."""

    gpu_model = models.CharField(max_length=64)
    rate_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    valid_from = models.DateTimeField()

    class Meta:
        ordering = ["gpu_model", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["gpu_model", "valid_from"], name="gpu_rate_model_from_unique"),
            models.CheckConstraint(condition=Q(rate_per_gpu_hour__gte=0), name="gpu_rate_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.rate_per_gpu_hour}/GPU-h from {self.valid_from:%Y-%m-%d}"


class Lease(models.Model):
    """One hold of GPUs on one node for one attempt of one job.

    ``state`` (:class:`~apps.core.choices.LeaseState`) moves only through :mod:`apps.metering.lease`,
    the one writer of every field here, which stamps the times beside it. Money fields are filled
    when the run ends (``billed_seconds``, ``cost``); ``charged`` is false for leases ended by the
    platform's fault.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="leases")
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey("pool.Node", on_delete=models.PROTECT, related_name="leases")
    node_rank = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=LeaseState.choices, default=LeaseState.OPENING)
    gpu_count = models.PositiveIntegerField()
    gpu_model = models.CharField(max_length=64)
    rate_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    time_limit_s = models.PositiveIntegerField()
    rented_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    run_ended_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField(null=True, blank=True,
                                   help_text="The last heartbeat of the node that listed this run before its end was "
                                             "reported: bounds the run's end (SPEC §4, one clock).")
    billed_seconds = models.PositiveIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=16, decimal_places=6, null=True, blank=True)
    charged = models.BooleanField(default=True)
    end_reason = models.CharField(max_length=16, blank=True, default="")
    staging_seconds = models.PositiveIntegerField(
        default=0, help_text="Of the billed seconds, how many the agent spent staging inputs not already in "
                             "its cache (pre-staged inputs cost nothing).")
    predicted_runtime_s = models.FloatField(null=True, blank=True,
                                            help_text="Planning only (never stops the job): from the account's "
                                                      "recent runs.")
    fenced_at = models.DateTimeField(
        null=True, blank=True,
        help_text="The server ended this attempt without the node's word (time limit enforced by the server, "
                  "a gang partner lost): its GPUs stay held, unbilled, until the node confirms the stop or is "
                  "declared down (SPEC §4).")
    fence_lifted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the fence was lifted: the node confirmed the stop, or went down.")

    class Meta:
        ordering = ["-rented_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node"], name="lease_job_attempt_node_unique"),
            models.CheckConstraint(
                condition=Q(run_ended_at__isnull=True) | Q(run_ended_at__gte=models.F("rented_at")),
                name="lease_run_end_after_rent",
            ),
        ]
        indexes = [models.Index(fields=["node", "released_at"])]

    def __str__(self) -> str:
        return f"lease {self.pk} job {self.job_id} on {self.node_id}"

    @property
    def is_open(self) -> bool:
        return self.released_at is None

    @property
    def is_fenced(self) -> bool:
        """Released on the meter, but its GPUs still held until the node confirms the stop."""
        return self.fenced_at is not None and self.fence_lifted_at is None

    @property
    def cost_display(self) -> Decimal | None:
        """Cost rounded to the cent for display; the ledger keeps 6 places."""
        return None if self.cost is None else self.cost.quantize(Decimal("0.01"))


class LeaseGpu(models.Model):
    """One GPU held by one lease. ``open`` while the lease holds it: until the lease is
    released, or, for a fenced lease (:attr:`Lease.fenced_at`), until the fence is lifted."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="lease_gpus")
    gpu = models.ForeignKey("pool.Gpu", on_delete=models.PROTECT, related_name="lease_gpus")
    open = models.BooleanField(default=True)

    class Meta:
        constraints = [
            # The database, not the scheduler, guarantees a GPU is in at most
            # one open lease: two cycles racing for a GPU cannot both commit.
            models.UniqueConstraint(fields=["gpu"], condition=Q(open=True), name="one_open_lease_per_gpu"),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} in lease {self.lease_id}{' (open)' if self.open else ''}"


class _MonthAlert(models.Model):
    """What a month's alert holds: the month's first day, the threshold passed (percent), the limit
    then (USD) and the spend that passed it (USD, 6 places), and when."""

    month = models.DateField()
    threshold_percent = models.PositiveSmallIntegerField()
    limit = models.DecimalField(max_digits=12, decimal_places=2)
    spent = models.DecimalField(max_digits=14, decimal_places=6)
    raised_at = models.DateTimeField()

    class Meta:
        abstract = True


class BudgetAlert(_MonthAlert):
    """An account's month's spend passed its alert threshold (issue 16): one row per account and month.

    ``month`` is the first day of the calendar month in the account's time zone. The row is made by
    :func:`apps.metering.budget.budget_alerts_scan` the first time the month's spend (USD, charged
    leases' cost so far, as the spend check counts it) passes ``threshold_percent`` of the effective
    limit; pages show it while the account's threshold is not above ``threshold_percent``. If the
    user raises the threshold and spend passes the new one, the same row is moved up (no second
    e-mail: that is once per month, :mod:`apps.notices`).
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget_alerts")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "month"], name="one_budget_alert_per_month")]

    def __str__(self) -> str:
        return f"budget alert {self.month:%Y-%m} of {self.owner_id} at {self.threshold_percent}%"


class ProjectBudgetAlert(_MonthAlert):
    """A project's month's spend passed its alert threshold (issue 25 item 3): one row per project and
    month (the site's time zone), as :class:`BudgetAlert` is per account. ``limit`` is the lower of the
    operator's limit and the owner's budget when it was raised (USD); ``spent`` every member's cost."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="budget_alerts")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "month"], name="one_project_alert_per_month")]

    def __str__(self) -> str:
        return f"budget alert {self.month:%Y-%m} of project {self.project_id} at {self.threshold_percent}%"
