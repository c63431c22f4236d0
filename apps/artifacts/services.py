"""Uploads of inputs and the resumable, verified upload of output bundles."""
from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from .models import Bundle, BundlePart, Upload

CHUNK_MAX_BYTES = 8 * 1024 * 1024


class ChunkError(Exception):
    """A bundle chunk or completion was refused; ``received_bytes`` says where to resume."""

    def __init__(self, message: str, received_bytes: int, conflict: bool = False):
        super().__init__(message)
        self.received_bytes = received_bytes
        self.conflict = conflict


def upload_create(*, owner, name: str, fileobj: File) -> Upload:
    """Store a user's input file and its sha256 and size.

    Raises:
        ValueError: the file is larger than ``E31_UPLOAD_MAX_BYTES``.
    """
    from django.conf import settings

    digest = hashlib.sha256()
    size = 0
    for chunk in fileobj.chunks():
        digest.update(chunk)
        size += len(chunk)
    if size > settings.E31_UPLOAD_MAX_BYTES:
        raise ValueError(f"is {size} bytes; the most this site accepts is {settings.E31_UPLOAD_MAX_BYTES}")
    fileobj.seek(0)
    upload = Upload(owner=owner, name=name[:255], size_bytes=size, sha256=digest.hexdigest())
    upload.file.save(name, fileobj, save=False)
    upload.save()
    return upload


def bundle_for(job, attempt: int, rank: int = 0) -> Bundle:
    """The bundle row of one node (rank) of the attempt, created on first use."""
    bundle, _ = Bundle.objects.get_or_create(job=job, attempt=attempt, rank=rank)
    return bundle


@transaction.atomic
def bundle_put_chunk(*, job, attempt: int, rank: int = 0, offset: int, data: bytes, sha256: str) -> int:
    """Keep one verified chunk of the attempt's bundle at ``offset``.

    Returns the bytes received so far.

    Raises:
        ChunkError: checksum mismatch, chunk too large, bundle already
            complete, or ``offset`` is not where the upload stands (conflict).
    """
    bundle = Bundle.objects.select_for_update().get(pk=bundle_for(job, attempt, rank).pk)
    if bundle.completed_at:
        raise ChunkError("bundle already complete", bundle.received_bytes, conflict=True)
    if len(data) > CHUNK_MAX_BYTES:
        raise ChunkError(f"chunk is {len(data)} bytes; at most {CHUNK_MAX_BYTES}", bundle.received_bytes)
    if hashlib.sha256(data).hexdigest() != (sha256 or "").lower():
        raise ChunkError("chunk checksum does not match X-Content-Sha256", bundle.received_bytes)
    if offset != bundle.received_bytes:
        if offset < bundle.received_bytes and BundlePart.objects.filter(
                bundle=bundle, offset=offset, sha256=sha256.lower()).exists():
            return bundle.received_bytes  # a repeated chunk: already kept
        raise ChunkError(f"offset {offset}, but {bundle.received_bytes} bytes are received",
                         bundle.received_bytes, conflict=True)
    name = default_storage.save(f"bundles/{job.pk}/{attempt}/{rank}/parts/{offset:015d}", ContentFile(data))
    BundlePart.objects.create(bundle=bundle, offset=offset, size_bytes=len(data), sha256=sha256.lower(), file=name)
    bundle.received_bytes += len(data)
    bundle.save(update_fields=["received_bytes"])
    return bundle.received_bytes


@transaction.atomic
def bundle_complete(*, job, attempt: int, rank: int = 0, size_bytes: int, sha256: str,
                    files: list[dict[str, Any]], retention_days: int) -> Bundle:
    """Join the parts into ``bundle.tar.gz``, verify size and sha256, keep the manifest.

    Idempotent: completing a complete bundle with the same checksum is a no-op.

    Raises:
        ChunkError: size or checksum of the joined archive differ from the claim.
    """
    bundle = Bundle.objects.select_for_update().get(pk=bundle_for(job, attempt, rank).pk)
    if bundle.completed_at:
        if bundle.sha256 == sha256.lower():
            return bundle
        raise ChunkError("bundle already complete with another checksum", bundle.received_bytes, conflict=True)
    if bundle.received_bytes != size_bytes:
        raise ChunkError(f"{bundle.received_bytes} bytes received, {size_bytes} announced", bundle.received_bytes)
    digest = hashlib.sha256()
    parts = list(bundle.parts.order_by("offset"))
    with _Joined(parts, digest) as joined:
        name = default_storage.save(f"bundles/{job.pk}/{attempt}/{rank}/bundle.tar.gz",
                                    File(joined, name="bundle.tar.gz"))
    if digest.hexdigest() != sha256.lower():
        default_storage.delete(name)
        raise ChunkError("bundle checksum does not match its parts", bundle.received_bytes)
    for part in parts:
        default_storage.delete(part.file.name)
    bundle.parts.all().delete()
    bundle.file.name = name
    bundle.size_bytes, bundle.sha256, bundle.files = size_bytes, sha256.lower(), files
    bundle.completed_at = timezone.now()
    bundle.expires_at = bundle.completed_at + timedelta(days=retention_days)
    bundle.save()
    return bundle


class _Joined:
    """A read-only file-like view over the parts in order, hashing as it is read."""

    def __init__(self, parts: list[BundlePart], digest: Any):
        self._parts = iter(parts)
        self._current = None
        self._digest = digest
        self.size = sum(p.size_bytes for p in parts)

    def __enter__(self) -> _Joined:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._current:
            self._current.close()

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if self._current is None:
                part = next(self._parts, None)
                if part is None:
                    break
                self._current = default_storage.open(part.file.name, "rb")
            data = self._current.read(-1 if n < 0 else n - len(out))
            if not data:
                self._current.close()
                self._current = None
                continue
            out += data
        self._digest.update(out)
        return bytes(out)


def bundles_latest(job) -> list[Bundle]:
    """The completed bundles (one per node rank) of the job's latest attempt that has any."""
    done = [b for b in job.bundles.all() if b.completed_at]
    if not done:
        return []
    attempt = max(b.attempt for b in done)
    return sorted((b for b in done if b.attempt == attempt), key=lambda b: b.rank)


def bundle_latest(job, rank: int = 0) -> Bundle | None:
    """The completed bundle of node ``rank`` (0: the only one on one node) of the latest attempt."""
    return next((b for b in bundles_latest(job) if b.rank == rank), None)


def uploads_from_files(*, owner, files) -> dict[str, Upload]:
    """Store every file of a submission; keyed by file name for ``upload:<name>`` references.

    Raises:
        ValueError: a file is too large (message names the file).
    """
    out: dict[str, Upload] = {}
    for f in files:
        try:
            out[f.name] = upload_create(owner=owner, name=f.name, fileobj=f)
        except ValueError as exc:
            raise ValueError(f"{f.name} {exc}") from None
    return out
