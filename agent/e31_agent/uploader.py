"""Resumable, verified upload of a bundle (protocol: "bundle upload").

Asks the server how much it has, sends the rest in chunks of at most
32 MiB, each with its sha256 in ``X-Content-Sha256``, then asks it to
verify the whole archive. A broken transfer resumes from what the server
holds, in this run or a later one. While one chunk is on the wire the next
is read and hashed in a worker thread (positioned reads: the file offset is
never shared). A server from before issue 15 takes at most 8 MiB: a larger
chunk it refuses for its size (413, or 400 "at most") makes the rest go in
8 MiB chunks.

A server that keeps its files in an S3-compatible store says ``direct`` (issue 15): the bundle
then goes straight to the store (:func:`upload_direct`), never through the server.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

import httpx

from .client import ApiClient, ApiError, OffsetMismatch, StaleAttempt
from .packer import Bundle

log = logging.getLogger(__name__)

CHUNK_BYTES = 32 * 1024 * 1024
OLD_CHUNK_BYTES = 8 * 1024 * 1024  # what every server takes (the limit before issue 15)
MAX_BAD_CHUNKS = 3  # checksum refusals of one chunk in a row before giving up
MAX_OFFSET_JUMPS = 10  # 409s in a row without progress before giving up
PASSES = 2  # a refused "complete" that names a shorter size gets one more pass
PART_THREADS = 4  # parts on the wire at once (direct uploads)
PART_TRIES = 5  # tries of one part PUT before the pass gives up
VERIFY_POLL_S = (0.25, 2.0)  # first and longest wait between asking whether the bundle is verified
VERIFY_WAIT_S = 6 * 3600.0  # how long to wait for it at most (the server's verification limit)


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
    status = client.bundle_status(job_id, attempt, abort=abort)
    if status.get("direct"):
        upload_direct(client, job_id, attempt, bundle, abort=abort)
        return
    received = int(status.get("received_bytes", 0))
    with open(bundle.path, "rb") as fh:
        for n in range(1, PASSES + 1):
            chunk_bytes = _send_from(client, job_id, attempt, bundle, fh, received, chunk_bytes, abort)
            try:
                client.bundle_complete(
                    job_id,
                    attempt,
                    size_bytes=bundle.size_bytes,
                    sha256=bundle.sha256,
                    files=bundle.files,
                    abort=abort,
                    unmatched=list(bundle.unmatched),
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
) -> int:
    """Send the bundle from byte ``received`` to its end; returns the chunk size it ended with."""
    size = bundle.size_bytes
    bad_chunks = jumps = 0
    fd = fh.fileno()
    with ThreadPoolExecutor(1, thread_name_prefix="bundle-read") as reader:
        ahead: Future[tuple[int, bytes, str]] | None = None
        while received < size:
            want = min(chunk_bytes, size - received)
            at, chunk, digest = ahead.result() if ahead is not None else (-1, b"", "")
            if at != received or len(chunk) != want:  # not the chunk read ahead (the server moved us)
                _, chunk, digest = _read_chunk(fd, received, want)
                if len(chunk) != want:
                    raise UploadError(f"the bundle file ends at byte {received + len(chunk)} of {size}")
            following = received + len(chunk)
            ahead = reader.submit(_read_chunk, fd, following, min(chunk_bytes, size - following)) if (
                following < size) else None
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
                if len(chunk) > OLD_CHUNK_BYTES and (exc.status == 413 or (
                        exc.status == 400 and "at most" in exc.detail)):
                    log.info("%s: the server takes smaller chunks (%s); sending %d bytes at a time",
                             where, exc.detail, OLD_CHUNK_BYTES)
                    chunk_bytes = OLD_CHUNK_BYTES
                    continue
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
    return chunk_bytes


def _read_chunk(fd: int, offset: int, length: int) -> tuple[int, bytes, str]:
    """(offset, the ``length`` bytes of ``fd`` at ``offset``, their hex sha256)."""
    parts = []
    got = 0
    while got < length:
        data = os.pread(fd, length - got, offset + got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    chunk = b"".join(parts)  # the one part itself when there is one (no copy)
    return offset, chunk, hashlib.sha256(chunk).hexdigest()


def upload_direct(
    client: ApiClient,
    job_id: int,
    attempt: int,
    bundle: Bundle,
    *,
    abort: threading.Event | None = None,
    threads: int = PART_THREADS,
) -> None:
    """Upload ``bundle`` straight to the server's object store and wait until it is verified.

    ``POST bundle/direct/`` gives the part size and a signed URL for each part the store does
    not hold yet (a later call resumes); the parts are PUT ``threads`` at a time (no
    Authorization header: each URL is signed for that part of this attempt's upload alone);
    ``POST bundle/complete/`` joins them and the server verifies the archive in the store
    (202); ``GET bundle/`` is asked (every 0.25 s, growing to 2 s) until it says ``complete`` (or ``refused``:
    the whole upload is tried once more).

    Raises:
        UploadError: a part could not be sent, the server refused the bundle twice, or it
            was not verified within ``VERIFY_WAIT_S``.
    """
    stop = abort or client.stop
    for n in range(1, PASSES + 1):
        try:
            offer = client.bundle_direct_start(job_id, attempt, size_bytes=bundle.size_bytes, abort=abort)
        except OffsetMismatch:  # verifying (an earlier run completed it) or complete already
            offer = None
        except StaleAttempt:
            raise
        except ApiError as exc:
            raise UploadError(f"server refused the direct upload: {exc.detail} (HTTP {exc.status})") from None
        if offer is not None:
            _put_parts(bundle, offer["parts"], threads, stop)
            try:
                client.bundle_complete(job_id, attempt, size_bytes=bundle.size_bytes, sha256=bundle.sha256,
                                       files=bundle.files, abort=abort, unmatched=list(bundle.unmatched))
            except OffsetMismatch as exc:
                if n == PASSES:
                    raise UploadError(f"the store holds {exc.received_bytes} bytes of {bundle.size_bytes}") from None
                log.warning("the store holds %d bytes only; resuming", exc.received_bytes)
                continue
            except StaleAttempt:
                raise
            except ApiError as exc:
                raise UploadError(f"server refused the bundle: {exc.detail} (HTTP {exc.status})") from None
        refused = _await_verified(client, job_id, attempt, abort, stop)
        if refused is None:
            return
        if n == PASSES:
            raise UploadError(f"server refused the bundle: {refused}")
        log.warning("server refused the bundle (%s); uploading it again", refused)
    raise UploadError("the bundle could not be uploaded")


def _await_verified(client: ApiClient, job_id: int, attempt: int, abort: threading.Event | None,
                    stop: threading.Event) -> str | None:
    """Ask ``GET bundle/`` until the bundle is complete (None) or refused (why)."""
    deadline = time.monotonic() + VERIFY_WAIT_S
    wait, longest = VERIFY_POLL_S
    while time.monotonic() < deadline:
        status = client.bundle_status(job_id, attempt, abort=abort)
        if status.get("complete"):
            return None
        if not status.get("verifying"):
            return status.get("refused") or "not verified"
        if stop.wait(wait):
            raise UploadError("stopped while the bundle was verified")
        wait = min(wait * 1.5, longest)
    raise UploadError(f"the bundle was not verified within {VERIFY_WAIT_S:.0f} s")


def _put_parts(bundle: Bundle, parts: list, threads: int, stop: threading.Event) -> None:
    """PUT each part (``{"part_number", "offset", "size_bytes", "url"}``) of the bundle file to its URL."""
    if not parts:
        return
    with open(bundle.path, "rb") as fh, httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as http, \
            ThreadPoolExecutor(min(threads, len(parts)), thread_name_prefix="bundle-part") as pool:
        fd = fh.fileno()
        futures = [pool.submit(_put_part, http, fd, p, stop) for p in parts]
        for future in futures:
            future.result()


def _put_part(http: httpx.Client, fd: int, part: dict, stop: threading.Event) -> None:
    """Read one part at its offset and PUT it to its signed URL, retried ``PART_TRIES`` times."""
    _, data, _ = _read_chunk(fd, int(part["offset"]), int(part["size_bytes"]))
    if len(data) != int(part["size_bytes"]):
        raise UploadError(f"the bundle file ends inside part {part['part_number']}")
    delay = 0.5
    for tries in range(1, PART_TRIES + 1):
        if stop.is_set():
            raise UploadError("stopped")
        try:
            response = http.put(part["url"], content=data)
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code < 300:
                return
            problem = f"HTTP {response.status_code}: {response.text[:200]}"
            if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                raise UploadError(f"part {part['part_number']} refused by the store: {problem}")
        if tries == PART_TRIES:
            raise UploadError(f"part {part['part_number']} could not be sent: {problem}")
        log.warning("part %s failed (%s); retrying in %.1f s", part["part_number"], problem, delay)
        if stop.wait(delay):
            raise UploadError("stopped")
        delay = min(delay * 2, 30.0)
