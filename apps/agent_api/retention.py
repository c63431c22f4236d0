"""The storage sweep (issue 15): what ``manage.py sweep_storage`` and Celery beat run daily.

It lives here because this is the lowest layer that sees all four kinds it keeps in check:
bundles and uploads (:mod:`apps.artifacts.retention`), log data and half-received bundles
(:mod:`apps.jobs.retention`), and this app's own agent reports. Policy (SPEC §2, docs/deploy.md):

- a bundle's archive is deleted at its ``expires_at`` (completion plus the job's
  ``output.retention_days``, default ``E31_RETENTION_DAYS_DEFAULT``); its row, manifest, the
  job's ledger and receipt stay;
- an upload no live job names is deleted ``E31_UPLOAD_GRACE_DAYS`` after it was uploaded;
- log chunks, compacted log objects (``logs/<job_id>/...``) and half-received bundles go when
  the job expires (release plus the same days);
- an agent report of a released job is deleted ``E31_AGENT_REPORTS_KEEP_DAYS`` after it was
  received (they only guard against a report delivered twice while the job runs).

Every step is idempotent and takes its rows with ``SKIP LOCKED``: two sweeps at once delete
each thing once, and a second sweep right after the first deletes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum, TextField
from django.db.models.functions import Cast, Length

from apps.artifacts.retention import BATCH, Swept, Usage, bundles_expire, bundles_usage, uploads_usage
from apps.core import clock
from apps.core.choices import JobState
from apps.jobs.retention import logs_sweep, logs_usage, partial_bundles_sweep, uploads_sweep

from .models import AgentReport

KINDS = ("bundles", "uploads", "logs", "agent_reports")
KIND_LABELS = {"bundles": "Bundles", "uploads": "Uploads", "logs": "Logs", "agent_reports": "Agent reports"}


@dataclass
class SweepReport:
    """What one sweep deleted (or would, ``dry_run``), one :class:`Swept` per kind of
    :data:`KINDS`, at ``now``."""

    now: datetime
    dry_run: bool
    kinds: list[Swept]

    @property
    def total_bytes(self) -> int:
        return sum(k.bytes for k in self.kinds)

    def lines(self) -> list[str]:
        """One line per kind and a total: what ``manage.py sweep_storage`` prints."""
        verb = "would delete" if self.dry_run else "deleted"
        out = [f"{k.kind}: {verb} {k.count} ({k.bytes} bytes"
               + (f"; {k.missing} already gone)" if k.missing else ")") for k in self.kinds]
        out.append(f"total: {verb} {sum(k.count for k in self.kinds)} ({self.total_bytes} bytes)")
        return out


def _report_bytes():
    """Bytes of a stored report, as the length of its payload's JSON text (an estimate)."""
    return Length(Cast("payload", TextField()))


def agent_reports_sweep(now: datetime, *, dry_run: bool = False, batch: int = BATCH * 5) -> Swept:
    """Delete agent reports of released jobs received ``E31_AGENT_REPORTS_KEEP_DAYS`` or more
    before ``now``: count rows, bytes of payload JSON."""
    swept = Swept("agent_reports")
    old = AgentReport.objects.filter(received_at__lte=now - timedelta(days=settings.E31_AGENT_REPORTS_KEEP_DAYS),
                                     job__state=JobState.RELEASED)
    if dry_run:
        agg = old.aggregate(n=Count("pk"), b=Sum(_report_bytes()))
        swept.count, swept.bytes = agg["n"] or 0, agg["b"] or 0
        return swept
    while True:
        with transaction.atomic():
            ids = list(old.order_by("pk").select_for_update(skip_locked=True).values_list("pk", flat=True)[:batch])
            if not ids:
                return swept
            rows = AgentReport.objects.filter(pk__in=ids)
            agg = rows.aggregate(b=Sum(_report_bytes()))
            swept.count += len(ids)
            swept.bytes += agg["b"] or 0
            rows.delete()


def sweep_storage(*, now: datetime | None = None, dry_run: bool = False) -> SweepReport:
    """Run every kind's sweep at ``now`` (default: the clock's now); ``dry_run`` deletes nothing
    and says what a sweep would free. Safe to run twice or twice at once."""
    now = now or clock.now()
    bundles = bundles_expire(now, dry_run=dry_run)
    partial_bundles_sweep(now, bundles, dry_run=dry_run)
    kinds = [bundles, uploads_sweep(now, dry_run=dry_run), logs_sweep(now, dry_run=dry_run),
             agent_reports_sweep(now, dry_run=dry_run)]
    return SweepReport(now=now, dry_run=dry_run, kinds=kinds)


def agent_reports_usage() -> Usage:
    """Stored agent reports: rows, bytes of payload JSON."""
    agg = AgentReport.objects.aggregate(n=Count("pk"), b=Sum(_report_bytes()))
    return Usage("agent_reports", agg["n"] or 0, agg["b"] or 0)


@dataclass(frozen=True)
class StorageRow:
    """One line of the operator's storage table: what a kind uses now and what the next sweep frees."""

    kind: str
    count: int
    bytes: int
    free_count: int
    free_bytes: int

    @property
    def label(self) -> str:
        return KIND_LABELS[self.kind]


def storage_report(now: datetime | None = None) -> list[StorageRow]:
    """Storage used by kind (bundles, uploads, logs, agent reports: count and bytes) and what the
    next sweep would free (a dry run at ``now``), for the operator's report."""
    used = {u.kind: u for u in (bundles_usage(), uploads_usage(), logs_usage(), agent_reports_usage())}
    freed = {k.kind: k for k in sweep_storage(now=now, dry_run=True).kinds}
    return [StorageRow(kind, used[kind].count, used[kind].bytes, freed[kind].count, freed[kind].bytes)
            for kind in KINDS]
