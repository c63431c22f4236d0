"""Fetching a job's inputs (``spec.data``) into its job dir before the run.

Sources: ``upload:<id>`` from the site (node token), and ``https://``,
``http://``, ``s3://``, ``gs://``, ``file://`` through fsspec. Downloads are
kept in a per-node cache keyed by checksum (when ``sha256`` is given) or by
URL for ``upload:`` sources, which never change; other URLs without a
checksum are fetched afresh each time since what they serve may change.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from .backoff import Backoff
from .client import Aborted, ApiClient, ApiError
from .extract import ExtractError, safe_extract
from .models import DataItem
from .paths import UnsafePath, is_within, resolve_inside

log = logging.getLogger(__name__)

SCHEMES = ("https", "http", "s3", "gs", "file")
CHUNK = 1 << 20  # bytes read per step; cancel and deadline are checked between steps
TRIES = 3  # per input, for transfers that break half way

Progress = Callable[[int, int | None], None]
"""Called with (bytes done, bytes total or None when not known yet)."""


class StagingError(Exception):
    """An input could not be staged; the message says which and why."""


class StagingAborted(Exception):
    """Staging stopped because the job was cancelled, timed out or dropped."""


@dataclass
class _Source:
    item: DataItem
    name: str  # file name the source goes by (basename)
    size: int | None = None
    is_dir: bool = False


class Stager:
    """Stages the inputs of one job into ``job_dir``.

    ``should_stop`` is polled between chunks; when it returns True staging
    raises :class:`StagingAborted`. ``cache_dir`` None disables the cache.
    """

    def __init__(
        self,
        *,
        client: ApiClient | None,
        job_dir: Path,
        tmp_dir: Path,
        cache_dir: Path | None,
        should_stop: Callable[[], bool] = lambda: False,
        progress: Progress | None = None,
    ) -> None:
        self.client = client
        self.job_dir = job_dir
        self.tmp_dir = tmp_dir
        self.cache_dir = cache_dir
        self.should_stop = should_stop
        self.progress = progress or (lambda done, total: None)
        self.done = 0

    def stage(self, items: list[DataItem]) -> int:
        """Stage every item in order; returns the bytes fetched or copied."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        sources = [self._describe(item) for item in items]
        for source in sources:
            self._check_stop()
            try:
                self._stage_one(source, sources)
            except FileNotFoundError:
                raise StagingError(f"{source.item.source}: not found") from None
            except PermissionError as exc:
                raise StagingError(f"{source.item.source}: permission denied: {exc}") from None
            except ImportError as exc:
                raise StagingError(
                    f"{source.item.source}: needs a package on the agent: {exc}"
                ) from None
        self.progress(self.done, self._total(sources))
        return self.done

    # -- planning ----------------------------------------------------------

    def _describe(self, item: DataItem) -> _Source:
        if item.source.startswith("upload:"):
            upload_id = item.source.removeprefix("upload:")
            if not upload_id or "/" in upload_id:
                raise StagingError(f"{item.source}: bad upload id")
            if self.client is None:
                raise StagingError(f"{item.source}: no server to fetch uploads from")
            return _Source(item, name=f"upload-{upload_id}")
        scheme = urlparse(item.source).scheme
        if scheme not in SCHEMES:
            raise StagingError(
                f"{item.source}: unsupported source (use upload:, https://, s3://, gs://)"
            )
        name = posixpath.basename(urlparse(item.source).path.rstrip("/")) or "download"
        source = _Source(item, name=name)
        cached = self._cached(item)
        if cached is not None:  # no need to ask a source we will not read
            source.size = cached.stat().st_size
            return source
        try:
            fs, path = _filesystem(item.source)
            info = fs.info(path)
            source.is_dir = info.get("type") == "directory"
            source.size = None if source.is_dir else info.get("size")
        except ImportError as exc:
            raise StagingError(
                f"{item.source}: {scheme}:// needs a package on the agent: {exc}"
            ) from None
        except FileNotFoundError:
            raise StagingError(f"{item.source}: not found") from None
        except Exception as exc:  # size is only for progress; the fetch reports real errors
            log.debug("no size for %s: %s", item.source, exc)
        return source

    def _destination(self, source: _Source, name: str) -> Path:
        """Where a non-extracted source lands; see the module docstring."""
        target = source.item.target
        try:
            base = resolve_inside(self.job_dir, target) if target else self.job_dir
            if not target or target.endswith("/") or base.is_dir():
                base.mkdir(parents=True, exist_ok=True)
                path = resolve_inside(base, name)
            else:
                base.parent.mkdir(parents=True, exist_ok=True)
                path = base
        except UnsafePath as exc:
            raise StagingError(f"{source.item.source}: target {exc}") from None
        if not is_within(path, self.job_dir):
            raise StagingError(f"{source.item.source}: target {target!r} leads outside the job dir")
        return path

    # -- fetching ----------------------------------------------------------

    def _stage_one(self, source: _Source, sources: list[_Source]) -> None:
        item = source.item
        if source.is_dir:
            self._stage_dir(source, sources)
            return
        local, name, owned = self._fetch(source, sources)
        try:
            if item.extract:
                try:
                    dest = (
                        resolve_inside(self.job_dir, item.target) if item.target else self.job_dir
                    )
                except UnsafePath as exc:
                    raise StagingError(f"{item.source}: target {exc}") from None
                try:
                    safe_extract(local, dest)
                except ExtractError as exc:
                    raise StagingError(f"{item.source}: {exc}") from None
            else:
                dest = self._destination(source, name)
                if dest.is_symlink() or dest.is_dir():
                    raise StagingError(f"{item.source}: target {item.target!r} is in the way")
                if owned:
                    shutil.move(local, dest)
                else:
                    shutil.copyfile(local, dest)
        finally:
            if owned and local.exists():
                local.unlink()

    def _fetch(self, source: _Source, sources: list[_Source]) -> tuple[Path, str, bool]:
        """A local copy of the source: (path, file name, whether the caller owns it).

        A cache hit is returned as is (not owned); a fresh download is put in
        the cache when it has a key, else handed over to the caller to move.
        """
        item = source.item
        cached = self._cached(item, existing=False)
        if cached and cached.exists():
            name_file = cached.with_suffix(".name")
            name = name_file.read_text() if name_file.exists() else source.name
            source.size = cached.stat().st_size
            self.done += source.size
            self.progress(self.done, self._total(sources))
            log.info("staging %s from the cache", item.source)
            return cached, name, False
        backoff = Backoff()
        for attempt in range(1, TRIES + 1):
            tmp = self.tmp_dir / f"fetch-{uuid.uuid4().hex}"
            start = self.done
            try:
                name = self._download(source, tmp, sources)
                break
            except (
                StagingError,
                StagingAborted,
                Aborted,
                FileNotFoundError,
                PermissionError,
                ImportError,
            ):
                tmp.unlink(missing_ok=True)
                raise
            except ApiError as exc:
                tmp.unlink(missing_ok=True)
                raise StagingError(f"{item.source}: {exc.detail} (HTTP {exc.status})") from None
            except Exception as exc:  # network trouble half way: try again from the start
                tmp.unlink(missing_ok=True)
                self.done = start
                if attempt == TRIES:
                    raise StagingError(f"{item.source}: {exc}") from None
                log.warning(
                    "staging %s failed (%s), try %d of %d", item.source, exc, attempt, TRIES
                )
                if self.should_stop():
                    raise StagingAborted() from None
                time.sleep(backoff.next())
        if cached:
            os.replace(tmp, cached)
            cached.with_suffix(".name").write_text(name)
            return cached, name, False
        return tmp, name, True

    def _download(self, source: _Source, tmp: Path, sources: list[_Source]) -> str:
        """Copy the source into ``tmp`` with a running checksum; returns its file name."""
        item = source.item
        digest = hashlib.sha256()
        if item.source.startswith("upload:"):
            assert self.client is not None
            upload_id = item.source.removeprefix("upload:")
            with self.client.open_upload(upload_id) as (response, filename):
                name = _clean_name(filename) or source.name
                length = response.headers.get("Content-Length")
                source.size = int(length) if length and length.isdigit() else None
                with open(tmp, "wb") as out:
                    for chunk in response.iter_bytes(CHUNK):
                        self._write(out, chunk, digest, sources)
        else:
            fs, path = _filesystem(item.source)
            name = source.name
            with _open(fs, path) as src, open(tmp, "wb") as out:
                while chunk := src.read(CHUNK):
                    self._write(out, chunk, digest, sources)
        if item.sha256 and digest.hexdigest() != item.sha256:
            raise StagingError(
                f"{item.source}: sha256 mismatch: expected {item.sha256}, got {digest.hexdigest()}"
            )
        return name

    def _stage_dir(self, source: _Source, sources: list[_Source]) -> None:
        """A directory source (``s3://bucket/prefix/``): every file under it, no cache."""
        item = source.item
        if item.extract or item.sha256:
            raise StagingError(f"{item.source}: a directory cannot be extracted or checksummed")
        fs, root = _filesystem(item.source)
        dest_root = self._destination(source, source.name)
        for path in sorted(fs.find(root)):
            rel = posixpath.relpath(path, root.rstrip("/"))
            try:
                dest = resolve_inside(dest_root, rel)
            except UnsafePath as exc:
                raise StagingError(f"{item.source}: {exc}") from None
            dest.parent.mkdir(parents=True, exist_ok=True)
            with _open(fs, path) as src, open(dest, "wb") as out:
                while chunk := src.read(CHUNK):
                    self._write(out, chunk, None, sources)

    def _write(self, out: IO[bytes], chunk: bytes, digest: Any, sources: list[_Source]) -> None:
        out.write(chunk)
        if digest is not None:
            digest.update(chunk)
        self.done += len(chunk)
        self.progress(self.done, self._total(sources))
        self._check_stop()

    def _check_stop(self) -> None:
        if self.should_stop():
            raise StagingAborted()

    def _cached(self, item: DataItem, *, existing: bool = True) -> Path | None:
        """The item's cache path (only if the entry exists, unless ``existing`` is False)."""
        key = self._cache_key(item)
        if not (self.cache_dir and key):
            return None
        path = self.cache_dir / key
        return path if (path.exists() or not existing) else None

    def _cache_key(self, item: DataItem) -> str | None:
        if item.sha256:
            return f"sha256-{item.sha256}"
        if item.source.startswith("upload:") and self.client is not None:
            url = f"{self.client.server}|{item.source}"
            return "upload-" + hashlib.sha256(url.encode()).hexdigest()[:40]
        return None

    @staticmethod
    def _total(sources: list[_Source]) -> int | None:
        sizes = [s.size for s in sources]
        if any(size is None for size in sizes):
            return None
        return sum(size for size in sizes if size is not None)


def _filesystem(url: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(url)


def _open(fs: Any, path: str) -> IO[bytes]:
    # block_size=0 streams http(s) instead of asking for ranges the server may not serve
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if {"http", "https"} & set(protocols):
        return fs.open(path, "rb", block_size=0)
    return fs.open(path, "rb")


def _clean_name(name: str | None) -> str | None:
    """A server-given file name reduced to a plain basename."""
    if not name:
        return None
    base = posixpath.basename(name.replace("\\", "/")).strip()
    return base if base not in ("", ".", "..") and "\x00" not in base else None
