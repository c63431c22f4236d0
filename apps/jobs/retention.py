"""Retention of what jobs leave (issue 15, SPEC §2 ``output.retention_days``): when a job's outputs
expire, and the sweeps of the kinds that need to know about jobs: uploads (kept while a live job
names them), log data and half-received bundles of expired jobs.

A job *expires* ``output.retention_days`` days (its spec's, else ``E31_RETENTION_DAYS_DEFAULT``)
after it was released; its bundle's archive expires at the bundle's own ``expires_at``
(completion plus the same days, :func:`apps.artifacts.services.bundle_complete`). Log data is
the log chunks in the database and any compacted log object stored under ``logs/<job_id>/``.
Only the Django Storage API is used (:mod:`apps.artifacts.retention`). The whole sweep is
:func:`apps.agent_api.retention.sweep_storage`.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.db.models.functions import Length

from apps.artifacts.models import Bundle, BundlePart, Upload, uploads_usable
from apps.artifacts.retention import BATCH, Swept, Usage, object_delete, upload_delete
from apps.core.choices import JobState

from .models import Job, LogChunk
from .sources import UPLOAD_REF, is_uuid

LOGS_PREFIX = "logs"  # compacted logs are stored as logs/<job_id>/<name>


def retention_days(spec: dict[str, Any] | None) -> int:
    """Days the job's outputs are kept after release: its spec's ``output.retention_days``, else
    the site's ``E31_RETENTION_DAYS_DEFAULT`` (SPEC §2)."""
    days = ((spec or {}).get("output") or {}).get("retention_days")
    return int(days) if isinstance(days, int) and days > 0 else settings.E31_RETENTION_DAYS_DEFAULT


def job_expires_at(job: Job) -> datetime | None:
    """When ``job``'s log data and any half-received bundle may be deleted: its release plus
    :func:`retention_days`; None while it is not released."""
    if job.state != JobState.RELEASED or job.released_at is None:
        return None
    return job.released_at + timedelta(days=retention_days(job.spec))


def _is_expired(released_at: datetime | None, days: Any, now: datetime) -> bool:
    """Whether a job released at ``released_at`` whose spec keeps outputs ``days`` has expired."""
    days = days if isinstance(days, int) and days > 0 else settings.E31_RETENTION_DAYS_DEFAULT
    return released_at is not None and released_at + timedelta(days=days) <= now


def _expired(rows: Iterable[tuple[int, datetime | None, Any]], now: datetime) -> list[int]:
    """The ids of ``(id, released_at, retention_days)`` rows expired at ``now``."""
    return [pk for pk, released_at, days in rows if _is_expired(released_at, days, now)]


def _released_before(now: datetime):
    """Released jobs that may have expired at ``now`` (released at least a day before)."""
    return Job.objects.filter(state=JobState.RELEASED, released_at__lte=now - timedelta(days=1))


def _expiry_rows(qs) -> Iterable[tuple[int, datetime | None, Any]]:
    return qs.values_list("pk", "released_at", "spec__output__retention_days").iterator()


# --- uploads ------------------------------------------------------------------------------------
def referenced_uploads(owner_ids: Iterable[int], now: datetime) -> set[str]:
    """The upload ids (lower-case text) that a live job of these owners names in ``data[].source``:
    a job not yet released, or released and not yet expired (it may still be re-run)."""
    refs: set[str] = set()
    jobs = Job.objects.filter(owner_id__in=list(owner_ids)).filter(
        ~Q(state=JobState.RELEASED) | Q(released_at__gt=now - timedelta(days=settings.E31_RETENTION_DAYS_MAX + 1)))
    for data, state, released_at, days in jobs.values_list(
            "spec__data", "state", "released_at", "spec__output__retention_days").iterator():
        if state == JobState.RELEASED and _is_expired(released_at, days, now):
            continue
        for item in data or []:
            match = UPLOAD_REF.fullmatch(str((item or {}).get("source", "")))
            if match:
                refs.add(match.group(1).lower())
    return refs


def uploads_sweep(now: datetime, *, dry_run: bool = False, batch: int = BATCH) -> Swept:
    """Delete uploads older than ``E31_UPLOAD_GRACE_DAYS`` that no live job names
    (:func:`referenced_uploads`): a file uploaded with a spec that failed validation, or one the
    job that used it outlived. Each batch locks its rows (``SKIP LOCKED``) and checks references
    under the lock; a submit locks the uploads it names (:func:`uploads_lock`), so a job
    committed meanwhile keeps its file and a submit after the delete is told the file is gone.
    """
    swept = Swept("uploads")
    old = Upload.objects.filter(created_at__lte=now - timedelta(days=settings.E31_UPLOAD_GRACE_DAYS))
    last = None
    while True:
        with transaction.atomic():
            qs = old.order_by("pk")
            if last is not None:
                qs = qs.filter(pk__gt=last)
            if not dry_run:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs[:batch])
            if not rows:
                return swept
            refs = referenced_uploads({u.owner_id for u in rows}, now)
            for upload in rows:
                if str(upload.pk) not in refs:
                    upload_delete(upload, swept, dry_run=dry_run)
            last = rows[-1].pk


def uploads_lock(owner_id: int, sources: Iterable[str], project_id: int | None = None) -> list[str]:
    """Lock the uploads that ``sources`` name (``upload:<id>``; the owner's or project
    ``project_id``'s, :func:`apps.artifacts.models.uploads_usable`), inside the caller's
    transaction, so the sweep cannot delete one under a submit; returns the sources whose upload
    is gone."""
    ids: dict[str, str] = {}
    for source in sources:
        match = UPLOAD_REF.fullmatch(source or "")
        if match:
            try:
                ids[str(uuid.UUID(match.group(1)))] = source
            except ValueError:
                ids[match.group(1)] = source
    if not ids:
        return []
    found = {str(pk) for pk in Upload.objects.select_for_update().filter(
        uploads_usable(owner_id, project_id), pk__in=[i for i in ids if is_uuid(i)]).values_list("pk", flat=True)}
    return [source for key, source in ids.items() if key not in found]



# --- logs and half-received bundles ---------------------------------------------------------------
def logs_sweep(now: datetime, *, dry_run: bool = False, batch: int = BATCH) -> Swept:
    """Delete the log data of expired jobs (:func:`job_expires_at`): their log chunks (counted per
    row, bytes of data) and every object under ``logs/<job_id>/`` (also of a job whose row is gone).

    Each batch locks its jobs' rows (``SKIP LOCKED``), so two sweeps count each chunk once.
    """
    swept = Swept("logs")
    with_chunks = _released_before(now).filter(Exists(LogChunk.objects.filter(job=OuterRef("pk"))))
    expired = _expired(_expiry_rows(with_chunks), now)
    for start in range(0, len(expired), batch):
        ids = expired[start:start + batch]
        with transaction.atomic():
            if not dry_run:
                ids = list(Job.objects.filter(pk__in=ids).select_for_update(skip_locked=True)
                           .values_list("pk", flat=True))
            chunks = LogChunk.objects.filter(job_id__in=ids)
            agg = chunks.aggregate(n=Count("pk"), b=Sum(Length("data")))
            swept.count += agg["n"] or 0
            swept.bytes += agg["b"] or 0
            if not dry_run:
                chunks.delete()
    _log_objects_sweep(now, swept, dry_run=dry_run)
    return swept


def _listdir(name: str) -> tuple[list[str], list[str]]:
    try:
        return default_storage.listdir(name)
    except (FileNotFoundError, NotADirectoryError):
        return [], []


def _object_names(prefix: str) -> list[str]:
    """Every stored object under ``prefix`` (a storage name), depth first."""
    dirs, files = _listdir(prefix)
    names = [f"{prefix}/{f}" for f in files]
    for d in dirs:
        names += _object_names(f"{prefix}/{d}")
    return names


def _log_objects_sweep(now: datetime, swept: Swept, *, dry_run: bool) -> None:
    """Delete compacted log objects (``logs/<job_id>/...``) of expired jobs and of jobs gone."""
    dirs, _files = _listdir(LOGS_PREFIX)
    job_ids = {int(d) for d in dirs if d.isascii() and d.isdigit()}
    if not job_ids:
        return
    jobs = Job.objects.filter(pk__in=job_ids)
    gone = job_ids - set(jobs.values_list("pk", flat=True))
    for job_id in sorted(gone | set(_expired(_expiry_rows(jobs.filter(state=JobState.RELEASED)), now))):
        for name in _object_names(f"{LOGS_PREFIX}/{job_id}"):
            size, present = object_delete(name, dry_run=dry_run)
            if present:
                swept.count += 1
                swept.bytes += size
                swept.names.append(name)


def partial_bundles_sweep(now: datetime, swept: Swept, *, dry_run: bool = False) -> None:
    """Delete what was received of bundles that never completed, once their job expired: the
    partial object and its part rows (counted in ``swept``, the bundles' kind)."""
    unfinished = Bundle.objects.filter(completed_at__isnull=True).filter(
        Q(received_bytes__gt=0) | Exists(BundlePart.objects.filter(bundle=OuterRef("pk"))))
    jobs = _released_before(now).filter(Exists(unfinished.filter(job=OuterRef("pk"))))
    expired = _expired(_expiry_rows(jobs), now)
    for start in range(0, len(expired), BATCH):
        with transaction.atomic():
            qs = unfinished.filter(job_id__in=expired[start:start + BATCH])
            if not dry_run:
                qs = qs.select_for_update(skip_locked=True)
            for bundle in qs:
                names = set(bundle.parts.values_list("file", flat=True))
                names.add(f"bundles/{bundle.job_id}/{bundle.attempt}/{bundle.rank}/bundle.tar.gz.partial")
                for name in sorted(names):
                    size, present = object_delete(name, dry_run=dry_run)
                    if present:
                        swept.count += 1
                        swept.bytes += size
                        swept.names.append(name)
                if not dry_run:
                    bundle.parts.all().delete()
                    bundle.received_bytes = 0
                    bundle.save(update_fields=["received_bytes"])


def logs_usage() -> Usage:
    """Log chunks stored in the database: rows, bytes of data (compacted log objects are not
    listed here: counting them lists the store; the sweep's dry run counts those it would free)."""
    agg = LogChunk.objects.aggregate(n=Count("pk"), b=Sum(Length("data")))
    return Usage("logs", agg["n"] or 0, agg["b"] or 0)
