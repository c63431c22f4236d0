"""The scheduler's ledger: each account's decayed GPU use, and the figures of recent cycles."""
from __future__ import annotations

from django.conf import settings
from django.db import models


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
