"""The scheduler's ledger: each account's decayed GPU use, and the figures of recent cycles."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class AccountUsage(models.Model):
    """An account's recent GPU use in one project, for fair share and runtime prediction (SPEC §5).

    One row per (owner, project): ``project`` empty is the owner's personal project (a job with no
    project, or with the owner's personal one), a team project has a row per member who ran in it;
    the fair tree (:mod:`apps.scheduling.core.fairtree`, https://slurm.schedmd.com/fair_tree.html)
    sums a project's rows for its usage and weighs each member's against the others'.
    ``decayed_gpu_seconds`` is kept incrementally: at each update the old
    value is decayed by ``2 ** (-elapsed / half_life)`` from ``updated_at``
    and the new GPU-seconds are added, so no cycle re-sums the ledger.
    ``recent_runtimes_s`` holds the account's last two actual run times
    (seconds, newest last) for runtime prediction, on the personal row only: a prediction is
    per user (Tsafrir, Etsion and Feitelson 2007), whatever the project.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gpu_usage")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, null=True, blank=True,
                                related_name="gpu_usage", help_text="Empty: the owner's personal project.")
    decayed_gpu_seconds = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()
    recent_runtimes_s = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            # One row per (owner, project) and one personal row per owner: two releases at once both
            # get_or_create the same row (usage_record locks it), never a second one.
            models.UniqueConstraint(fields=["owner", "project"], name="usage_owner_project_unique"),
            models.UniqueConstraint(fields=["owner"], condition=models.Q(project__isnull=True),
                                    name="usage_owner_personal_unique"),
        ]

    def __str__(self) -> str:
        where = f" in project {self.project_id}" if self.project_id else ""
        return f"usage of {self.owner_id}{where}: {self.decayed_gpu_seconds:.0f} GPU-s"


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


class NodeCache(models.Model):
    """What one node's input cache holds, as its agent last reported (issue 14 item 5): the input
    identities (:func:`e31_protocol.inputs.input_identity`: opaque ``in1-<hex>``, an upload scoped by
    its owner, a URL by its credentials; issue 23) of its entries, most recently used first, at
    most :data:`apps.scheduling.node_cache.REPORT_MAX`. An agent that reports nothing (older than
    this field) has no row: its node gets no cache-affinity preference."""

    node = models.OneToOneField("pool.Node", on_delete=models.CASCADE, related_name="input_cache")
    inputs = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"cache of node {self.node_id}: {len(self.inputs)} inputs"
