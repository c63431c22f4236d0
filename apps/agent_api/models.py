"""What the agents' protocol stores: the reports already applied."""
from __future__ import annotations

from django.db import models


class AgentReport(models.Model):
    """A report already applied, so a report delivered twice changes nothing.

    The unique constraint closes the race of two deliveries of one report
    handled at once by two web processes: the second insert fails.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="agent_reports")
    attempt = models.PositiveIntegerField()
    node_rank = models.PositiveIntegerField(default=0, help_text="Rank of the node that sent it: each rank of a "
                                                                 "multi-node job numbers its reports from 1.")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=32)
    received_at = models.DateTimeField()
    payload = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node_rank", "seq"], name="agent_report_seq_unique")
        ]

    def __str__(self) -> str:
        return f"report {self.seq} {self.type} of job {self.job_id}.{self.attempt}"
