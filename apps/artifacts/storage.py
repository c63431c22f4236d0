"""The storage port of uploads and bundles (issue 15 item 1): local files or an S3-compatible store.

Which one is ``settings.STORAGES["default"]`` (``E31_STORAGE_URL``, docs/deploy.md "Storage"):

* local files (``FileSystemStorage``, ``make run``): the bundle code keeps its fast path, chunks
  written with ``pwrite`` into one partial file that is renamed once verified
  (:func:`local_path`).
* an S3-compatible store (django-storages' ``S3Storage``): :func:`is_direct` is true and
  :func:`object_store` gives the operations the site needs beside the Django Storage API:
  multipart uploads whose parts the agent PUTs with URLs signed here, streamed and ranged
  reads, server-side copies, and signed GETs. Bytes then never pass through a web process.

Names are the Storage API's (``bundles/<job>/<attempt>/<rank>/bundle.tar``, ``uploads/<owner>/<id>``);
the store's key is the storage's ``location`` prefix plus the name, as S3Storage makes it, so
``default_storage.delete(name)`` and the functions here agree on every object.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from boto3.s3.transfer import TransferConfig
from django.conf import settings
from django.core.files.storage import default_storage
from django.utils.http import content_disposition_header
from storages.utils import clean_name

STAGING_PREFIX = "staging/"  # names of objects not verified yet (deleted when refused or stale)
READ_BYTES = 4 * 1024 * 1024
COPY_ONCE_MAX_BYTES = 5 * 1024**3  # S3's limit on one CopyObject


def is_direct() -> bool:
    """Whether the default storage is an S3-compatible store (agents upload and download bytes
    straight to and from it with signed URLs), not local files."""
    return hasattr(default_storage, "bucket_name") and hasattr(default_storage, "connection")


def local_path(name: str) -> str:
    """The local file of storage name ``name`` (local files only).

    Raises:
        NotImplementedError: the storage is an object store (no local paths).
    """
    return default_storage.path(name)


@dataclass(frozen=True)
class Part:
    """One uploaded part of a multipart upload: ``number`` (1-based), ``size_bytes``, ``etag``."""

    number: int
    size_bytes: int
    etag: str


class ObjectStore:
    """The S3 operations of the port, on the default storage's bucket and credentials.

    Every ``name`` is a Storage API name; :meth:`key` turns it into the object's key.
    Errors of the store (``botocore.exceptions.ClientError``) are raised as they come, except
    where a method says otherwise.
    """

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.client = storage.connection.meta.client
        self.bucket = storage.bucket_name

    def key(self, name: str) -> str:
        """The object key of storage name ``name`` (the storage's ``location`` prefix + name)."""
        return self.storage._normalize_name(clean_name(name))

    # -- multipart uploads (the agent PUTs the parts) ----------------------------------------

    def multipart_start(self, name: str) -> str:
        """Start a multipart upload of ``name``; returns its upload id."""
        return self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key(name))["UploadId"]

    def part_url(self, name: str, upload_id: str, number: int, expires_s: int) -> str:
        """A URL that PUTs part ``number`` of that upload of ``name`` and nothing else, valid
        ``expires_s`` seconds (the signature covers the key, the upload id and the part number)."""
        return self.client.generate_presigned_url(
            "upload_part", ExpiresIn=expires_s,
            Params={"Bucket": self.bucket, "Key": self.key(name), "UploadId": upload_id, "PartNumber": number})

    def parts(self, name: str, upload_id: str) -> list[Part]:
        """The parts of that upload the store holds, by number. Raises ClientError ``NoSuchUpload``
        when the upload is gone (completed or aborted)."""
        out: list[Part] = []
        marker = 0
        while True:
            page = self.client.list_parts(Bucket=self.bucket, Key=self.key(name), UploadId=upload_id,
                                          PartNumberMarker=marker)
            out += [Part(p["PartNumber"], p["Size"], p["ETag"]) for p in page.get("Parts", [])]
            if not page.get("IsTruncated"):
                return sorted(out, key=lambda p: p.number)
            marker = page["NextPartNumberMarker"]

    def multipart_complete(self, name: str, upload_id: str, parts: list[Part]) -> None:
        """Join ``parts`` (as :meth:`parts` listed them) into the object ``name``."""
        self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=self.key(name), UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})

    def multipart_abort(self, name: str, upload_id: str) -> None:
        """Abort that upload (its parts are deleted); one already gone is no error."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key(name), UploadId=upload_id)
        except self.client.exceptions.NoSuchUpload:
            pass

    def multipart_uploads(self, name_prefix: str) -> list[tuple[str, str, Any]]:
        """Uploads in progress under ``name_prefix``: (key, upload id, initiated datetime)."""
        out = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.key(name_prefix)}
        while True:
            page = self.client.list_multipart_uploads(**kwargs)
            out += [(u["Key"], u["UploadId"], u["Initiated"]) for u in page.get("Uploads", [])]
            if not page.get("IsTruncated"):
                return out
            kwargs.update(KeyMarker=page["NextKeyMarker"], UploadIdMarker=page["NextUploadIdMarker"])

    def abort_key(self, key: str, upload_id: str) -> None:
        """:meth:`multipart_abort` by object key (as :meth:`multipart_uploads` lists them)."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except self.client.exceptions.NoSuchUpload:
            pass

    # -- objects -----------------------------------------------------------------------------

    def size(self, name: str) -> int | None:
        """The object's size in bytes, or None when there is no such object."""
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self.key(name))["ContentLength"])
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def open_read(self, name: str, start: int = 0, length: int | None = None) -> Any:
        """A stream of the object's bytes from ``start`` (``length`` of them, or to the end): one
        GET; the answer has ``read(n)`` and ``close()``."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(name)}
        if start or length is not None:
            kwargs["Range"] = f"bytes={start}-" + (f"{start + length - 1}" if length is not None else "")
        return self.client.get_object(**kwargs)["Body"]

    def copy(self, source: str, target: str, size_bytes: int) -> None:
        """Copy object ``source`` (``size_bytes``) to ``target`` inside the store; the bytes never
        leave it. One ``CopyObject`` up to S3's 5 GiB limit for it, else boto3's managed multipart
        copy in 1 GiB parts (its 8 MiB default made 125 requests per GB: 4.7x slower on moto)."""
        source_ref = {"Bucket": self.bucket, "Key": self.key(source)}
        if size_bytes <= COPY_ONCE_MAX_BYTES:
            self.client.copy_object(CopySource=source_ref, Bucket=self.bucket, Key=self.key(target))
            return
        config = TransferConfig(multipart_threshold=COPY_ONCE_MAX_BYTES, multipart_chunksize=1 << 30)
        self.client.copy(source_ref, self.bucket, self.key(target), Config=config)

    def delete(self, name: str) -> None:
        """Delete the object ``name`` (none there is no error)."""
        self.client.delete_object(Bucket=self.bucket, Key=self.key(name))

    def get_url(self, name: str, *, filename: str | None = None, content_type: str | None = None,
                inline: bool = False, expires_s: int | None = None) -> str:
        """A signed GET of the object, valid ``expires_s`` (default ``E31_STORAGE_URL_EXPIRY_S``)
        seconds; the store answers it, Range included. ``filename`` and ``content_type`` become
        the answer's ``Content-Disposition`` and ``Content-Type``."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(name)}
        if filename:
            params["ResponseContentDisposition"] = content_disposition_header(not inline, filename)
        if content_type:
            params["ResponseContentType"] = content_type
        return self.client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=expires_s or settings.E31_STORAGE_URL_EXPIRY_S)


def object_store() -> ObjectStore:
    """The :class:`ObjectStore` of the default storage.

    Raises:
        RuntimeError: the storage is local files (:func:`is_direct` is false).
    """
    if not is_direct():
        raise RuntimeError("the default storage is not an S3-compatible store")
    return ObjectStore(default_storage)


class SpanReader:
    """Bytes ``[start, start + length)`` of a stored file as a file-like (``seek``, ``read``,
    ``close``): a ranged GET of the store, or the local file. ``seek`` takes positions in the
    stored file; a seek away from the span's current position starts a new read there."""

    def __init__(self, name: str, start: int, length: int) -> None:
        self.name, self.pos, self.end = name, start, start + length
        self._body: Any = None

    def seek(self, pos: int) -> int:
        if pos != self.pos:
            self.close()
            self.pos = pos
        return pos

    def read(self, n: int = -1) -> bytes:
        left = self.end - self.pos
        if left <= 0:
            return b""
        if self._body is None:
            self._body = object_store().open_read(self.name, self.pos, left)
        data = self._body.read(left if n < 0 else min(n, left))
        self.pos += len(data)
        return data

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None


def open_span(fieldfile: Any, start: int, length: int) -> Any:
    """A file-like over the stored file of ``fieldfile`` positioned at ``start``, for reading at
    most ``length`` bytes: the local file itself, or a :class:`SpanReader` (one ranged GET; an
    S3 file opened through the Storage API would download the whole object first)."""
    if is_direct():
        return SpanReader(fieldfile.name, start, length)
    fh = fieldfile.open("rb")
    fh.seek(start)
    return fh


def iter_blocks(body: Any, block: int = READ_BYTES) -> Iterator[bytes]:
    """The blocks of a stream until it ends."""
    while data := body.read(block):
        yield data
