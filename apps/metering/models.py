"""The meter: GPU rates and leases (SPEC §4)."""
from __future__ import annotations

import zoneinfo
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q


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

    Money fields are filled when the run ends (``billed_seconds``, ``cost``);
    ``charged`` is false for leases ended by the platform's fault.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="leases")
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey("pool.Node", on_delete=models.PROTECT, related_name="leases")
    node_rank = models.PositiveIntegerField(default=0)
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


class AccountUsage(models.Model):
    """An account's recent GPU use, for fair share and runtime prediction (SPEC §5).

    ``decayed_gpu_seconds`` is kept incrementally: at each update the old
    value is decayed by ``2 ** (-elapsed / half_life)`` from ``updated_at``
    and the new GPU-seconds are added, so no cycle re-sums the ledger.
    ``recent_runtimes_s`` holds the account's last two actual run times
    (seconds, newest last) for runtime prediction.
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gpu_usage")
    decayed_gpu_seconds = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()
    recent_runtimes_s = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"usage of {self.owner_id}: {self.decayed_gpu_seconds:.0f} GPU-s"


class SchedulerCycle(models.Model):
    """One scheduling cycle's figures, kept for the admin (the newest few hundred)."""

    at = models.DateTimeField(db_index=True)
    policy = models.CharField(max_length=16)
    seconds = models.FloatField()
    queued = models.PositiveIntegerField()
    placed = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"cycle at {self.at:%H:%M:%S}: {self.seconds * 1000:.1f} ms"


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


class NodeDowntime(models.Model):
    """One span a node was ``down`` (SPEC §3): from its last heartbeat to its next registration.

    ``gpus`` is the node's present GPUs by model when it went down
    (``{"H100-80GB": 4}``), so reports count down GPU-hours per model.
    ``up_at`` is null while the node is still down.
    """

    node = models.ForeignKey("pool.Node", on_delete=models.CASCADE, related_name="downtimes")
    down_at = models.DateTimeField()
    up_at = models.DateTimeField(null=True, blank=True)
    gpus = models.JSONField(default=dict)

    class Meta:
        ordering = ["-down_at"]
        constraints = [
            # At most one open span per node: a duplicate "lost" pass records nothing twice.
            models.UniqueConstraint(fields=["node"], condition=Q(up_at__isnull=True),
                                    name="one_open_downtime_per_node"),
            models.CheckConstraint(condition=Q(up_at__isnull=True) | Q(up_at__gte=models.F("down_at")),
                                   name="downtime_up_after_down"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} down from {self.down_at:%Y-%m-%d %H:%M}"
