"""Retention of stored files (issue 15): what the storage sweep deletes of bundles, and the
storage calls every kind's sweep shares.

Only the Django Storage API is used (``exists``, ``size``, ``delete``, ``listdir``), never a
local path, so the sweep works the same on the filesystem of ``make run`` and on an
S3-compatible store. An object already gone is counted as ``missing`` and is no error. Rows
are taken with ``SELECT ... FOR UPDATE SKIP LOCKED`` in small batches: two sweeps at once
each take different rows, and a row a request holds (a chunk upload, a completion) waits
for the next sweep. The orchestration of all kinds is :mod:`apps.agent_api.retention`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce

from .models import Bundle, Upload

BATCH = 200  # rows locked and swept per transaction


@dataclass
class Swept:
    """What a sweep of one kind deleted (or, in a dry run, would delete).

    ``count``: objects or rows; ``bytes``: bytes freed (a stored object's size as the storage
    reports it, or the size recorded on the row when the object is already gone: 0 then);
    ``missing``: objects that were already gone (counted in ``count``, no error).
    """

    kind: str
    count: int = 0
    bytes: int = 0
    missing: int = 0
    names: list[str] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, int | str]:
        return {"kind": self.kind, "count": self.count, "bytes": self.bytes, "missing": self.missing}


@dataclass(frozen=True)
class Usage:
    """Storage one kind uses now: ``count`` objects or rows, ``bytes``."""

    kind: str
    count: int
    bytes: int


class OutputsExpired(Exception):
    """The bundle's archive was deleted by the storage sweep; ``expired_at`` says when."""

    def __init__(self, job_id: int, expired_at: datetime):
        self.job_id = job_id
        self.expired_at = expired_at
        super().__init__(f"The outputs of job {job_id} expired on {expired_at:%Y-%m-%d} and were deleted "
                         "(the site keeps outputs for the job's output.retention_days). Its manifest, "
                         "ledger and receipt stay.")


def bundle_check_kept(bundle: Bundle) -> None:
    """Raise :class:`OutputsExpired` when the sweep deleted ``bundle``'s archive."""
    if bundle.expired_at is not None:
        raise OutputsExpired(bundle.job_id, bundle.expired_at)


def object_delete(name: str, *, dry_run: bool = False) -> tuple[int, bool]:
    """Delete one stored object ``name`` (a storage name, never a path).

    Returns:
        (bytes it held, whether it was there). An object already gone is ``(0, False)``;
        a dry run measures and deletes nothing.
    """
    if not name or not default_storage.exists(name):
        return 0, False
    try:
        size = default_storage.size(name)
    except FileNotFoundError:  # deleted between the two calls (another sweep)
        return 0, False
    if not dry_run:
        default_storage.delete(name)  # FileSystemStorage and S3Storage both ignore a missing object
    return size, True


def bundles_expire(now: datetime, *, dry_run: bool = False, batch: int = BATCH) -> Swept:
    """Delete the archives of completed bundles whose ``expires_at`` is at or before ``now``; stamp
    each row ``expired_at = now`` (the row, its manifest and the job's ledger stay).

    Idempotent: a stamped bundle is never taken again. Units: bytes.
    """
    swept = Swept("bundles")
    due = Bundle.objects.filter(completed_at__isnull=False, expired_at__isnull=True, expires_at__lte=now)
    if dry_run:
        for bundle in due.only("pk", "file", "job_id").iterator():
            size, present = object_delete(bundle.file.name, dry_run=True)
            _count(swept, bundle.file.name, size, present)
        return swept
    last_pk = 0
    while True:
        with transaction.atomic():
            rows = list(due.filter(pk__gt=last_pk).order_by("pk").select_for_update(skip_locked=True)[:batch])
            if not rows:
                return swept
            for bundle in rows:
                name = bundle.file.name
                size, present = object_delete(name)
                _count(swept, name, size, present)
                bundle.file.name = ""
                bundle.expired_at = now
                bundle.save(update_fields=["file", "expired_at"])
            last_pk = rows[-1].pk


def _count(swept: Swept, name: str, size: int, present: bool) -> None:
    swept.count += 1
    swept.bytes += size
    swept.missing += 0 if present else 1
    swept.names.append(name)


def bundles_usage() -> Usage:
    """Bundles whose archive is stored (completed and not expired, or being received): count, bytes
    (the completed size, or the bytes received so far)."""
    agg = Bundle.objects.filter(expired_at__isnull=True).filter(
        Q(completed_at__isnull=False) | Q(received_bytes__gt=0)).aggregate(
        n=Count("pk"), b=Sum(Coalesce("size_bytes", "received_bytes")))
    return Usage("bundles", agg["n"] or 0, agg["b"] or 0)


def uploads_usage() -> Usage:
    """Stored uploads: count, bytes."""
    agg = Upload.objects.aggregate(n=Count("pk"), b=Sum("size_bytes"))
    return Usage("uploads", agg["n"] or 0, agg["b"] or 0)


def upload_delete(upload: Upload, swept: Swept, *, dry_run: bool = False) -> None:
    """Delete ``upload``'s stored object and (unless ``dry_run``) its row, counted in ``swept``.
    Call with the row locked (``select_for_update``) and its references checked under that lock."""
    name = upload.file.name
    size, present = object_delete(name, dry_run=dry_run)
    _count(swept, name, size if present else 0, present)
    if not dry_run:
        upload.delete()
