"""Bundles uploaded by agents straight to an S3-compatible store (issue 15 item 1).

With an object store as the default storage (:func:`.storage.is_direct`) the bytes of a bundle
never pass through a web process:

1. ``start`` (:func:`bundle_direct_start`): the server starts (or resumes) one multipart upload
   of a *staging* object for the attempt's bundle of that node rank,
   ``staging/bundles/<job>/<attempt>/<rank>/<random>.tar``, and answers the part size, the
   parts the store already holds (resuming) and one signed ``PUT`` URL for each part still
   missing. A URL names that key, that upload id and that part number: it writes nothing else.
2. The agent PUTs the parts to the store.
3. ``complete`` (:func:`bundle_direct_complete`): the server lists the parts the store holds
   (the store's word, not the agent's), joins them (``CompleteMultipartUpload``), records
   the claim (size, sha256, manifest) and queues :func:`bundle_direct_verify` on the side
   queue; it answers at once that the bundle is being verified.
4. The side worker streams the object through :func:`.verify.verify_archive_stream`, outside
   any row lock and off the request path. A bundle that passes is copied inside the store to
   its kept name (``bundles/<job>/<attempt>/<rank>/bundle.tar``, as in local mode) and marked
   complete; one that fails is deleted and the upload starts over (``refused`` says why).
   The agent polls ``GET bundle/`` and sends ``finished`` only once it says ``complete``, so
   the job is released after verification, as in local mode.

Nothing half-stored survives a crash: unverified bytes only ever live under ``staging/``,
and :func:`staging_sweep` aborts uploads and deletes staging objects that no bundle is
verifying, or that have waited longer than ``E31_STORAGE_STAGING_MAX_AGE_S``.
"""
from __future__ import annotations

import logging
import math
import secrets
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError
from django.conf import settings
from django.db import transaction

from apps.core import clock

from .keep import BUNDLE_NAMES, bundle_keep, bundle_kept_name, bundle_start_over
from .models import Bundle
from .services import ChunkError, bundle_for, bundle_max_bytes
from .signals import bundle_verify_wanted
from .storage import STAGING_PREFIX, Part, is_direct, object_store
from .verify import BundleInvalid, verify_archive_stream

log = logging.getLogger(__name__)

PARTS_MAX = 10_000  # S3's limit on the parts of one upload
PART_MIN_BYTES = 5 * 1024 * 1024  # S3's smallest part (all but the last)


def part_bytes_for(size_bytes: int) -> int:
    """The part size of a ``size_bytes`` upload, bytes: ``E31_STORAGE_PART_BYTES`` (64 MiB), larger
    when that would need more than S3's 10,000 parts (rounded up to whole MiB)."""
    mib = 1024 * 1024
    least = math.ceil(size_bytes / PARTS_MAX / mib) * mib
    return max(settings.E31_STORAGE_PART_BYTES, PART_MIN_BYTES, least)


def _staging_name(bundle: Bundle) -> str:
    return (f"{STAGING_PREFIX}bundles/{bundle.job_id}/{bundle.attempt}/{bundle.rank}/"
            f"{secrets.token_hex(8)}.tar")


def bundle_direct_start(*, job, attempt: int, rank: int = 0, size_bytes: int) -> dict[str, Any]:
    """Start, or resume, the direct upload of the attempt's bundle (rank ``rank``) of ``size_bytes``.

    A new size (or no upload yet) starts a new multipart upload (an older one is aborted);
    the same size resumes the one in progress. Returns ``{"upload_id", "part_bytes",
    "parts": [{"part_number", "offset", "size_bytes", "url"}] (still to send),
    "uploaded": [{"part_number", "size_bytes"}] (held by the store), "expires_in_s"}``.

    Raises:
        ChunkError: the bundle is complete already or being verified (conflict), or
            ``size_bytes`` is over the site's cap.
    """
    if size_bytes > bundle_max_bytes():
        raise ChunkError(f"the bundle would exceed the site's limit of {bundle_max_bytes()} bytes", 0)
    store = object_store()
    with transaction.atomic():
        bundle = Bundle.objects.select_for_update().get(pk=bundle_for(job, attempt, rank).pk)
        if bundle.completed_at:
            raise ChunkError("bundle already complete", bundle.received_bytes, conflict=True)
        if bundle.verifying_since:
            raise ChunkError("the bundle is being verified; ask GET bundle/ until it is complete or refused",
                             bundle.received_bytes, conflict=True)
        stale = None
        if not bundle.direct_upload_id or bundle.size_bytes != size_bytes:
            if bundle.direct_upload_id:
                stale = (bundle.staging_name, bundle.direct_upload_id)
            bundle.staging_name = _staging_name(bundle)
            bundle.direct_upload_id = store.multipart_start(bundle.staging_name)
            bundle.direct_started_at = clock.now()
            bundle.size_bytes, bundle.received_bytes, bundle.refused = size_bytes, 0, ""
            bundle.save(update_fields=["staging_name", "direct_upload_id", "direct_started_at", "size_bytes",
                                       "received_bytes", "refused"])
        name, upload_id = bundle.staging_name, bundle.direct_upload_id
    if stale:
        store.multipart_abort(*stale)
    part_bytes = part_bytes_for(size_bytes)
    count = max(1, math.ceil(size_bytes / part_bytes))
    try:
        held = {p.number: p for p in store.parts(name, upload_id)}
    except ClientError as exc:
        if _code(exc) != "NoSuchUpload":
            raise
        _forget_upload(bundle.pk, upload_id)  # aborted in the store (lifecycle rule, operator): a new one
        return bundle_direct_start(job=job, attempt=attempt, rank=rank, size_bytes=size_bytes)
    expires = settings.E31_STORAGE_PART_URL_EXPIRY_S
    todo = []
    for number in range(1, count + 1):
        offset = (number - 1) * part_bytes
        length = min(part_bytes, size_bytes - offset)
        if number in held and held[number].size_bytes == length:
            continue
        todo.append({"part_number": number, "offset": offset, "size_bytes": length,
                     "url": store.part_url(name, upload_id, number, expires)})
    return {"upload_id": upload_id, "part_bytes": part_bytes, "parts": todo, "expires_in_s": expires,
            "uploaded": [{"part_number": p.number, "size_bytes": p.size_bytes} for p in held.values()
                         if p.number <= count]}


def bundle_direct_complete(*, job, attempt: int, rank: int = 0, size_bytes: int, sha256: str,
                           files: list[dict[str, Any]], retention_days: int) -> Bundle:
    """Join the uploaded parts and queue the bundle's verification (:func:`bundle_direct_verify`).

    Returns the bundle: ``completed_at`` set when it was verified already (the same claim
    again), else ``verifying_since`` (ask ``GET bundle/`` until it is complete or refused).

    Raises:
        ChunkError: no direct upload in progress; the parts the store holds do not make
            ``size_bytes`` (``received_bytes``: the bytes of whole parts from the start, a
            conflict: send the rest); already complete or being verified with another sha256.
    """
    bundle = bundle_for(job, attempt, rank)
    if bundle.completed_at or bundle.verifying_since:
        if bundle.sha256 == sha256.lower():
            return bundle
        raise ChunkError("bundle already complete or being verified with another checksum",
                         bundle.received_bytes, conflict=True)
    if not bundle.direct_upload_id:
        raise ChunkError("no direct upload in progress: POST bundle/direct/ first"
                         + (f" (the last one was refused: {bundle.refused})" if bundle.refused else ""), 0)
    if bundle.size_bytes != size_bytes:
        raise ChunkError(f"the upload was started for {bundle.size_bytes} bytes, not {size_bytes}", 0)
    store = object_store()
    part_bytes = part_bytes_for(size_bytes)
    count = max(1, math.ceil(size_bytes / part_bytes))
    try:
        held = store.parts(bundle.staging_name, bundle.direct_upload_id)
    except ClientError as exc:
        if _code(exc) != "NoSuchUpload":
            raise
        held = None
    if held is None and store.size(bundle.staging_name) != size_bytes:
        _forget_upload(bundle.pk, bundle.direct_upload_id)
        raise ChunkError("the upload is gone from the store; start it again (POST bundle/direct/)", 0,
                         conflict=True)
    if held is not None:  # (None: joined already by a ``complete`` whose answer was lost)
        whole = _whole_prefix(held, part_bytes, size_bytes)
        if whole < size_bytes or len(held) != count:
            raise ChunkError(f"the store holds {whole} of {size_bytes} bytes in whole parts; send the rest",
                             whole, conflict=True)
        store.multipart_complete(bundle.staging_name, bundle.direct_upload_id, held)
    with transaction.atomic():
        bundle = Bundle.objects.select_for_update().get(pk=bundle.pk)
        bundle.direct_upload_id = ""
        bundle.received_bytes = size_bytes
        bundle.sha256 = sha256.lower()
        bundle.files = [dict(f) for f in files]
        bundle.verifying_since = clock.now()
        bundle.refused = ""
        bundle.save(update_fields=["direct_upload_id", "received_bytes", "sha256", "files", "verifying_since",
                                   "refused"])
        when = bundle.verifying_since
        transaction.on_commit(lambda: bundle_verify_wanted.send(
            sender=Bundle, bundle_id=bundle.pk, since=when.isoformat(), retention_days=retention_days))
    return bundle


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _forget_upload(bundle_id: int, upload_id: str) -> None:
    """The bundle's multipart upload ``upload_id`` no longer exists in the store: drop its id."""
    Bundle.objects.filter(pk=bundle_id, direct_upload_id=upload_id).update(direct_upload_id="", received_bytes=0)


def _whole_prefix(held: list[Part], part_bytes: int, size_bytes: int) -> int:
    """Bytes from the start covered by consecutive parts of the expected sizes."""
    done = 0
    for want, part in enumerate(held, start=1):
        length = min(part_bytes, size_bytes - done)
        if part.number != want or part.size_bytes != length:
            break
        done += length
    return done


def bundle_direct_verify(*, bundle_id: int, since: str, retention_days: int) -> str | None:
    """Verify the joined staging object of bundle ``bundle_id`` (side worker; no row lock is
    held while it is read) and keep it or drop it. ``since``: the ``verifying_since`` the
    request that queued this saw (ISO 8601); a bundle no longer in that state is left alone
    (a duplicate delivery, or the sweep gave up on it).

    Returns None when the bundle was kept, else why it was refused (also in ``refused``).
    """
    bundle = Bundle.objects.filter(pk=bundle_id).first()
    if bundle is None or bundle.completed_at or not bundle.verifying_since \
            or bundle.verifying_since.isoformat() != since:
        return None
    store = object_store()
    name = bundle.staging_name
    problem = None
    found = None
    try:
        body = store.open_read(name)
        try:
            found = verify_archive_stream(body, bundle.size_bytes or 0, bundle.files)
        finally:
            body.close()
        if found.sha256 != bundle.sha256:
            problem = "bundle checksum does not match its parts"
    except BundleInvalid as exc:
        problem = f"bundle does not match its manifest: {exc}"
    except ClientError as exc:
        problem = f"the store could not give the bundle back: {exc}"
    kept = ""
    if problem is None and found is not None:
        kept = bundle_kept_name(bundle, found.format)
        store.copy(name, kept, bundle.size_bytes or 0)
    with transaction.atomic():
        bundle = Bundle.objects.select_for_update().get(pk=bundle_id)
        if bundle.completed_at or not bundle.verifying_since or bundle.verifying_since.isoformat() != since:
            return None
        if problem is None and found is not None:
            bundle_keep(bundle=bundle, name=kept, size_bytes=bundle.size_bytes or 0, sha256=bundle.sha256,
                        files=bundle.files, found=found, retention_days=retention_days, now=clock.now())
        else:
            bundle_start_over(bundle=bundle, why=problem or "not verified")
    store.delete(name)
    if problem:
        log.warning("bundle %s refused: %s", bundle_id, problem)
    return problem


def staging_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Drop what is unverified and stale from the store (beat, ``E31_STORAGE_STAGING_SWEEP_S``).

    * a bundle whose direct upload began, or whose verification was queued, more than
      ``E31_STORAGE_STAGING_MAX_AGE_S`` ago and is not complete: its multipart upload is
      aborted, its staging object (and any copy made under its kept name) deleted, and it
      starts over (``refused``: "not verified in time");
    * a multipart upload under ``staging/`` that no bundle names, older than that age
      (a crash between starting it and saving its id): aborted.

    Returns counts: ``{"bundles", "uploads_aborted"}``.
    """
    if not is_direct():
        return {"bundles": 0, "uploads_aborted": 0}
    now = now or clock.now()
    cutoff = now - timedelta(seconds=settings.E31_STORAGE_STAGING_MAX_AGE_S)
    store = object_store()
    bundles = 0
    stale = Bundle.objects.filter(completed_at__isnull=True, direct_started_at__lt=cutoff).exclude(staging_name="")
    for bundle_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            bundle = Bundle.objects.select_for_update().filter(pk=bundle_id, completed_at__isnull=True).first()
            if bundle is None or not bundle.staging_name:
                continue
            name, upload_id = bundle.staging_name, bundle.direct_upload_id
            kept = [f"bundles/{bundle.job_id}/{bundle.attempt}/{bundle.rank}/{n}" for n in BUNDLE_NAMES.values()]
            bundle_start_over(bundle=bundle, why="not verified in time")
        if upload_id:
            store.multipart_abort(name, upload_id)
        for gone in [name, *kept]:
            store.delete(gone)
        bundles += 1
    named = set(Bundle.objects.exclude(direct_upload_id="").values_list("direct_upload_id", flat=True))
    aborted = 0
    for key, upload_id, initiated in store.multipart_uploads(STAGING_PREFIX):
        if upload_id not in named and initiated < cutoff:
            store.abort_key(key, upload_id)
            aborted += 1
    return {"bundles": bundles, "uploads_aborted": aborted}
