"""Resumable, verified upload of a bundle (protocol: "bundle upload").

Asks the server how much it has, sends the rest in chunks of at most
8 MiB, each with its sha256 in ``X-Content-Sha256``, then asks it to
verify the whole archive. A broken transfer resumes from what the server
holds, in this run or a later one.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import BinaryIO

from .client import ApiClient, ApiError, OffsetMismatch, StaleAttempt
from .packer import Bundle

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024
MAX_BAD_CHUNKS = 3  # checksum refusals of one chunk in a row before giving up
MAX_OFFSET_JUMPS = 10  # 409s in a row without progress before giving up
PASSES = 2  # a refused "complete" that names a shorter size gets one more pass


class UploadError(Exception):
    """The bundle could not be uploaded; the message says why."""


def upload_bundle(
    client: ApiClient,
    job_id: int,
    attempt: int,
    bundle: Bundle,
    *,
    abort: threading.Event | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> None:
    """Upload ``bundle`` for (job, attempt) and have the server verify it.

    Raises :class:`UploadError`, or the client's ``StaleAttempt`` and
    ``Aborted``, which the caller handles as for any job call.
    """
    chunk_bytes = min(chunk_bytes, CHUNK_BYTES)
    received = client.bundle_received(job_id, attempt, abort=abort)
    with open(bundle.path, "rb") as fh:
        for n in range(1, PASSES + 1):
            _send_from(client, job_id, attempt, bundle, fh, received, chunk_bytes, abort)
            try:
                client.bundle_complete(
                    job_id,
                    attempt,
                    size_bytes=bundle.size_bytes,
                    sha256=bundle.sha256,
                    files=bundle.files,
                    abort=abort,
                )
                return
            except OffsetMismatch as exc:
                received = exc.received_bytes
                if n == PASSES or received >= bundle.size_bytes:
                    raise UploadError(
                        f"server refused the bundle: it holds {received} bytes"
                        f" of {bundle.size_bytes}"
                    ) from None
                log.warning("server holds %d bytes only; resuming from there", received)
            except StaleAttempt:
                raise
            except ApiError as exc:
                raise UploadError(
                    f"server refused the bundle: {exc.detail} (HTTP {exc.status})"
                ) from None


def _send_from(
    client: ApiClient,
    job_id: int,
    attempt: int,
    bundle: Bundle,
    fh: BinaryIO,
    received: int,
    chunk_bytes: int,
    abort: threading.Event | None,
) -> None:
    """Send the bundle from byte ``received`` to its end."""
    size = bundle.size_bytes
    bad_chunks = jumps = 0
    while received < size:
        fh.seek(received)
        chunk = fh.read(chunk_bytes)
        digest = hashlib.sha256(chunk).hexdigest()
        try:
            now = client.bundle_put(job_id, attempt, received, chunk, digest, abort=abort)
        except OffsetMismatch as exc:
            jumps += 1
            if jumps > MAX_OFFSET_JUMPS:
                raise UploadError(f"server keeps asking for other offsets ({exc.detail})") from None
            log.info("bundle offset %d refused, server holds %d", received, exc.received_bytes)
            received = exc.received_bytes
            continue
        except StaleAttempt:
            raise
        except ApiError as exc:
            where = f"chunk at {received}"
            if exc.status != 400:
                raise UploadError(f"{where}: {exc.detail} (HTTP {exc.status})") from None
            bad_chunks += 1
            if bad_chunks > MAX_BAD_CHUNKS:
                raise UploadError(f"{where} refused {bad_chunks} times: {exc.detail}") from None
            log.warning("%s refused (%s); sending it again", where, exc.detail)
            continue
        bad_chunks = jumps = 0
        received = now
    if received > size:
        raise UploadError(f"server holds {received} bytes of a {size}-byte bundle")
