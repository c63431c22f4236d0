"""Uploads of inputs and the resumable, verified upload of output bundles."""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Func, IntegerField

from apps.core import clock

from .keep import bundle_keep, bundle_kept_name, bundle_start_over
from .models import Bundle, BundlePart, Upload
from .verify import BundleInvalid, Verified, verify_archive

CHUNK_MAX_BYTES = 32 * 1024 * 1024  # fewer requests per GB: each costs a transaction and thread hops
MANIFEST_FILES_MAX = 100_000  # files a manifest may list (the agent API's BundleCompleteSerializer)
# Archive bytes one file takes beside its data, at most: a pax header with a 1,000-character
# path (3 blocks), its ustar header, padding, and its line in manifest.json.
FILE_ROOM_BYTES = 6 * 512


class ChunkError(Exception):
    """A bundle chunk or completion was refused; ``received_bytes`` says where to resume."""

    def __init__(self, message: str, received_bytes: int, conflict: bool = False):
        super().__init__(message)
        self.received_bytes = received_bytes
        self.conflict = conflict


def upload_create(*, owner, name: str, fileobj: File, project_id: int | None = None) -> Upload:
    """Store a user's input file (for project ``project_id``'s jobs, when given: the caller has
    checked the uploader may submit there) and its sha256 and size.

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
    upload = Upload(owner=owner, project_id=project_id, name=name[:255], size_bytes=size, sha256=digest.hexdigest())
    upload.file.save(name, fileobj, save=False)
    upload.save()
    return upload


def bundle_max_bytes() -> int:
    """Largest archive accepted, bytes: ``E31_BUNDLE_MAX_BYTES`` (the cap on the files the agent packs)
    plus room for what is not file data: 1 % + 1 MiB (gzip framing of an older agent's tar.gz) and
    ``FILE_ROOM_BYTES`` for each of up to ``MANIFEST_FILES_MAX`` files (a plain tar's headers
    are not compressed)."""
    from django.conf import settings

    cap = settings.E31_BUNDLE_MAX_BYTES
    return cap + cap // 100 + (1 << 20) + MANIFEST_FILES_MAX * FILE_ROOM_BYTES


def bundle_for(job, attempt: int, rank: int = 0) -> Bundle:
    """The bundle row of one node (rank) of the attempt, created on first use."""
    bundle, _ = Bundle.objects.get_or_create(job=job, attempt=attempt, rank=rank)
    return bundle


def _partial_name(job, attempt: int, rank: int) -> str:
    """Storage name of the archive being received (chunks are written into it at their offsets).
    The name is the one from before plain tars, so an upload in flight across the upgrade goes on."""
    return f"bundles/{job.pk}/{attempt}/{rank}/bundle.tar.gz.partial"


@transaction.atomic
def bundle_put_chunk(*, job, attempt: int, rank: int = 0, offset: int, data: bytes, sha256: str) -> int:
    """Keep one verified chunk of the attempt's bundle at ``offset``.

    The chunk is written into one partial file at its offset (the file cut
    back to ``offset`` first, so a chunk whose commit was lost is simply
    written again) while a worker thread hashes it (a chunk whose sha256
    differs is cut off again before it is refused), and recorded as a
    :class:`BundlePart` (offset, size, sha256), so a repeated chunk is
    recognised. One file instead of a file per chunk saves joining them at
    ``complete`` (``benchmarks/bundle_throughput.py``). At most
    ``CHUNK_MAX_BYTES`` (32 MiB; 8 MiB before issue 15, which older agents
    still send). Needs a local-filesystem storage (``default_storage.path``).

    Returns the bytes received so far.

    Raises:
        ChunkError: checksum mismatch, chunk too large, bundle over the size
            cap or already complete, or ``offset`` is not where the upload
            stands (conflict).
    """
    bundle = Bundle.objects.select_for_update().get(pk=bundle_for(job, attempt, rank).pk)
    if bundle.completed_at:
        raise ChunkError("bundle already complete", bundle.received_bytes, conflict=True)
    if len(data) > CHUNK_MAX_BYTES:
        raise ChunkError(f"chunk is {len(data)} bytes; at most {CHUNK_MAX_BYTES}", bundle.received_bytes)
    if offset + len(data) > bundle_max_bytes():
        raise ChunkError(f"the bundle would exceed the site's limit of {bundle_max_bytes()} bytes",
                         bundle.received_bytes)
    if offset != bundle.received_bytes:
        if offset < bundle.received_bytes and BundlePart.objects.filter(
                bundle=bundle, offset=offset, sha256=(sha256 or "").lower()).exists():
            return bundle.received_bytes  # a repeated chunk: already kept (nothing is written)
        raise ChunkError(f"offset {offset}, but {bundle.received_bytes} bytes are received",
                         bundle.received_bytes, conflict=True)
    name = _partial_name(job, attempt, rank)
    path = default_storage.path(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, offset)
        digest = _hash_pool().submit(_sha256_hex, data)  # hashed in a worker thread while written here
        try:
            view = memoryview(data)
            written = 0
            while written < len(data):
                written += os.pwrite(fd, view[written:], offset + written)
        finally:
            matches = digest.result() == (sha256 or "").lower()
        if not matches:
            os.ftruncate(fd, offset)  # nothing of a refused chunk stays
            raise ChunkError("chunk checksum does not match X-Content-Sha256", bundle.received_bytes)
    finally:
        os.close(fd)
    BundlePart.objects.create(bundle=bundle, offset=offset, size_bytes=len(data), sha256=sha256.lower(), file=name)
    bundle.received_bytes += len(data)
    bundle.save(update_fields=["received_bytes"])
    return bundle.received_bytes


_HASH_POOL: ThreadPoolExecutor | None = None


def _hash_pool() -> ThreadPoolExecutor:
    """Threads that hash chunks while the request's thread writes them (``hashlib`` releases the GIL)."""
    global _HASH_POOL
    if _HASH_POOL is None:
        _HASH_POOL = ThreadPoolExecutor(4, thread_name_prefix="chunk-sha")
    return _HASH_POOL


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bundle_complete(*, job, attempt: int, rank: int = 0, size_bytes: int, sha256: str,
                    files: list[dict[str, Any]], retention_days: int) -> Bundle:
    """Verify the received archive whole, then keep it as ``bundle.tar`` (``bundle.tar.gz`` from an
    older agent).

    In one read of the archive (:func:`.verify.verify_archive`): its size and sha256 against
    the claim, and every file against the manifest ``files`` (each member a regular file with
    a safe name, listed once, its size and sha256 as listed; every listed file present). The
    kept manifest gives each file of a ``tar`` its data ``offset`` in the archive (issue 16:
    one file is a Range read). Only a bundle that passes is kept; the agent sends
    ``finished`` (and the job is released) only after this answers 200. The archive is read
    outside any row lock (a multi-GB bundle once held its row for the whole read); a chunk
    that arrived meanwhile makes this a conflict to retry. Idempotent: completing a complete
    bundle with the same checksum is a no-op. A refused bundle starts over: what was received
    is dropped, so the agent may upload it again from byte 0 (docs/agent-protocol.md).

    Raises:
        ChunkError: size, checksum or manifest differ (the message says which file); its
            ``received_bytes`` is then 0. A conflict when the bundle is already complete with
            another checksum, or grew while it was read.
    """
    with transaction.atomic():
        bundle = Bundle.objects.select_for_update().get(pk=bundle_for(job, attempt, rank).pk)
        if bundle.completed_at:
            return _already_complete(bundle, sha256)
    received = bundle.received_bytes
    partial = default_storage.path(_partial_name(job, attempt, rank))
    problem, found = _received_problem(bundle, partial, size_bytes=size_bytes, sha256=sha256, files=files)
    with transaction.atomic():
        bundle = Bundle.objects.select_for_update().get(pk=bundle.pk)
        if bundle.completed_at:
            return _already_complete(bundle, sha256)
        if bundle.received_bytes != received:
            raise ChunkError("the bundle grew while it was verified; complete it again", bundle.received_bytes,
                             conflict=True)
        if problem is None and found is not None:
            name = bundle_kept_name(bundle, found.format)
            os.replace(partial, default_storage.path(name))
            return bundle_keep(bundle=bundle, name=name, size_bytes=size_bytes, sha256=sha256, files=files,
                               found=found, retention_days=retention_days, now=clock.now())
        bundle_start_over(bundle=bundle)  # the session starts over: a PUT at offset 0 is welcome again
        if os.path.exists(partial):
            os.remove(partial)
    raise ChunkError(f"{problem}; send the bundle again from byte 0", 0)


def _already_complete(bundle: Bundle, sha256: str) -> Bundle:
    if bundle.sha256 == sha256.lower():
        return bundle
    raise ChunkError("bundle already complete with another checksum", bundle.received_bytes, conflict=True)


def _received_problem(bundle: Bundle, partial: str, *, size_bytes: int, sha256: str,
                      files: list[dict[str, Any]]) -> tuple[str | None, Verified | None]:
    """(what is wrong with the received archive at ``partial`` against the claim, or None;
    what verifying it found, or None)."""
    if bundle.received_bytes != size_bytes:
        return f"{bundle.received_bytes} bytes received, {size_bytes} announced", None
    if not os.path.exists(partial):
        return "no bytes of the bundle were received", None
    try:
        found = verify_archive(partial, size_bytes, files)
    except BundleInvalid as exc:
        return f"bundle does not match its manifest: {exc}", None
    if found.sha256 != sha256.lower():
        return "bundle checksum does not match its parts", None
    return None, found


def bundles_latest(job) -> list[Bundle]:
    """The completed bundles (one per node rank) of the job's latest attempt that has any."""
    done = [b for b in job.bundles.all() if b.completed_at]
    if not done:
        return []
    attempt = max(b.attempt for b in done)
    return sorted((b for b in done if b.attempt == attempt), key=lambda b: b.rank)


class JsonArrayLength(Func):
    """The number of elements of a JSON array column, counted by the database (PostgreSQL's
    ``jsonb_array_length``, SQLite's ``json_array_length``): the list is never loaded."""

    function = "jsonb_array_length"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, function="json_array_length", **extra)


def bundles_for_lists():
    """Bundles without their file lists (``files`` deferred) but with ``files_count`` (the number
    of files, counted by the database), for prefetching into a list of jobs: a job list never
    inlines a manifest (issue 26: four jobs of 100,000 files each made one page of
    ``GET /api/v1/jobs/`` 58.5 MB and 5.4 s)."""
    return Bundle.objects.defer("files").annotate(files_count=JsonArrayLength("files"))


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
