"""Fetching a job's inputs (``spec.data``) into the node's cache and its job dir.

Sources: ``upload:<id>`` from the site (node token); ``https://`` and
``http://`` through :mod:`~e31_agent.netguard` (public addresses only, each
redirect checked, the connection pinned to the checked address, unless the
operator allows a host with ``--allow-host``); ``s3://``, ``gs://`` through
fsspec; ``file://`` only under a directory the operator allowed
(``--allow-file-root``). Archives are unpacked within the caps of
:class:`~e31_agent.extract.ExtractLimits`. Downloads go into
the node's :class:`~e31_agent.cache.InputCache` when the input has a key
(its identity, :attr:`~e31_agent.models.DataItem.identity`, with its sha256,
the source's version and size, or nothing more for an upload; see
:func:`~e31_agent.cache.key_for`): only a job whose input has the same
identity finds the entry, whatever sha256 it names. A sha256 given in the spec is
checked on the downloaded bytes, and a size the source announced too. An
input already in the cache is put in the job dir at once (reflink, hard
link or copy: :func:`~e31_agent.cache.link_or_copy`) and costs no
download; :attr:`Stager.fetched` counts the bytes that were downloaded.

:meth:`Stager.prefetch` fills the cache only (pre-staging a queued job).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import posixpath
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

import httpx
from e31_protocol.redact import redact_text

from .backoff import Backoff
from .cache import FillAborted, InputCache, key_for, link_or_copy
from .client import Aborted, ApiClient, ApiError
from .credentials import CredentialsError, credentials_id, storage_options
from .diskspace import NoSpace, space_check
from .extract import ExtractError, ExtractLimits, safe_extract
from .models import DataItem
from .netguard import AddressPolicy, BlockedAddress, guarded_info, guarded_request
from .paths import UnsafePath, is_within, resolve_inside

log = logging.getLogger(__name__)

SCHEMES = ("https", "http", "s3", "gs", "file")
WEB = ("https", "http")  # fetched through netguard, never fsspec
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
    key: str | None = None  # cache key; None: not cacheable
    credentials_id: str | None = None  # who it is read as (credentials.credentials_id); None: anonymously


class Stager:
    """Stages the inputs of one job into ``job_dir`` (None: :meth:`prefetch` only).

    ``should_stop`` is polled between chunks; when it returns True staging
    raises :class:`StagingAborted`. ``cache`` None disables the cache.
    ``file_roots``: directories ``file://`` sources may lie under (none: no
    ``file://`` at all). ``hardlink_ok``: a cached file may be hard-linked
    into the job dir (only when the job cannot write it). ``net_policy``: which
    non-public hosts ``http(s)://`` sources may reach (default: none).
    ``extract_limits``: caps on what an archive may unpack to. ``credentials``: ``{name: storage
    options JSON}`` from the assignment, for the items whose ``credentials`` names one; an ``s3://``
    or ``gs://`` item without is read anonymously (:mod:`e31_agent.credentials`).
    """

    def __init__(
        self,
        *,
        client: ApiClient | None,
        job_dir: Path | None,
        tmp_dir: Path,
        cache: InputCache | None,
        file_roots: tuple[Path, ...] | list[Path] = (),
        hardlink_ok: bool = False,
        should_stop: Callable[[], bool] = lambda: False,
        progress: Progress | None = None,
        net_policy: AddressPolicy | None = None,
        extract_limits: ExtractLimits | None = None,
        credentials: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self._credentials = dict(credentials or {})  # in memory only
        self.job_dir = job_dir
        self.tmp_dir = tmp_dir
        self.cache = cache
        self.file_roots = tuple(Path(os.path.realpath(r)) for r in file_roots)
        self.hardlink_ok = hardlink_ok
        self.net_policy = net_policy or AddressPolicy()
        self.extract_limits = extract_limits or ExtractLimits()
        self.should_stop = should_stop
        self.progress = progress or (lambda done, total: None)
        self.done = 0  # bytes staged so far, fetched or from the cache
        self.fetched = 0  # of those, bytes downloaded
        self.cached = 0  # of those, bytes already in the cache
        self.total: int | None = None

    def stage(self, items: list[DataItem]) -> int:
        """Stage every item in order into the job dir; returns the bytes staged."""
        assert self.job_dir is not None, "stage() needs a job dir"
        sources = self._plan(items)
        self._space_check(sources)
        keys = [s.key for s in sources if s.key]
        with self.cache.pinned(keys) if self.cache else _nothing():
            for index, source in enumerate(sources):
                self._check_stop()
                with _naming(index), _errors(source):
                    self._stage_one(source, sources)
        self.progress(self.done, self._total(sources))
        return self.done

    def prefetch(self, items: list[DataItem]) -> tuple[int, int | None]:
        """Download the cacheable items that are not cached yet into the cache (no job dir).

        Returns (bytes in the cache now, bytes of every cacheable item or None
        when a size is unknown). Items without a cache key are skipped.
        """
        if self.cache is None:
            return 0, None
        planned = list(enumerate(self._plan(items)))
        sources = [s for _, s in planned if s.key and not s.is_dir]
        with self.cache.pinned([s.key for s in sources if s.key]):
            for index, source in planned:
                if not (source.key and not source.is_dir):
                    continue
                self._check_stop()
                with _naming(index), _errors(source):
                    self._local(source, sources)
        return self.done, self._total(sources)

    # -- planning ----------------------------------------------------------

    def _plan(self, items: list[DataItem]) -> list[_Source]:
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        sources = []
        for index, item in enumerate(items):
            with _naming(index), _errors(_Source(item, name="")):
                sources.append(self._describe(item))
        self.total = self._total(sources)
        return sources

    def _describe(self, item: DataItem) -> _Source:
        server = self.client.server if self.client is not None else ""
        if item.source.startswith("upload:"):
            upload_id = item.source.removeprefix("upload:")
            if not upload_id or "/" in upload_id:
                raise StagingError(f"{item.source}: bad upload id")
            if self.client is None:
                raise StagingError(f"{item.source}: no server to fetch uploads from")
            source = _Source(item, name=f"upload-{upload_id}")
            source.key = key_for(item.identity, source=item.source, sha256=item.sha256, info=None, server=server)
            self._size_from_cache(source)
            return source
        parsed = urlparse(item.source)
        if parsed.scheme not in SCHEMES:
            raise StagingError(f"{item.source}: unsupported source (use upload:, https://, s3://, gs://)")
        if parsed.scheme == "file":
            self._check_file_root(item.source, unquote(parsed.path))
        name = posixpath.basename(parsed.path.rstrip("/")) or "download"
        source = _Source(item, name=name)
        if item.credentials:
            if item.credentials not in self._credentials:
                raise StagingError(f"{item.source}: its credentials ({item.credentials}) were not sent to this node")
            # Not cached (source.key stays None, item.identity is None): the server sends no credentials
            # id yet, and an entry read with one tenant's credentials must never serve another's job.
            source.credentials_id = credentials_id(self._credentials[item.credentials])
        if item.sha256 and item.identity is not None:
            source.key = key_for(item.identity, source=item.source, sha256=item.sha256, info=None)
            if self._size_from_cache(source):
                return source  # no need to ask a source we will not read
        try:
            if parsed.scheme in WEB:
                info = guarded_info(item.source, self.net_policy)
            else:
                fs, path = self._filesystem(item)
                info = fs.info(path)
        except BlockedAddress as exc:
            raise StagingError(f"{item.source}: {exc}") from None
        except CredentialsError as exc:
            raise StagingError(f"{item.source}: {exc}") from None
        except ImportError as exc:
            raise StagingError(f"{item.source}: {parsed.scheme}:// needs a package on the agent: {exc}") from None
        except FileNotFoundError:
            raise StagingError(f"{item.source}: not found") from None
        except PermissionError:
            raise StagingError(f"{item.source}: access denied{_anonymous_hint(item)}") from None
        except Exception as exc:  # size is only for progress; the fetch reports real errors
            log.debug("no size for %s: %s", redact_text(item.source), redact_text(str(exc)))
            return source
        source.is_dir = info.get("type") == "directory"
        source.size = None if source.is_dir else info.get("size")
        if source.key is None and not source.is_dir and item.identity is not None:
            source.key = key_for(item.identity, source=item.source, sha256=None, info=info)
            self._size_from_cache(source)
        return source

    def _filesystem(self, item: DataItem) -> tuple[Any, str]:
        """The fsspec filesystem and path of ``item``, with its credentials or anonymously."""
        options = storage_options(item.source, self._credentials.get(item.credentials) if item.credentials else None)
        return _filesystem(item.source, options)

    def _space_check(self, sources: list[_Source]) -> None:
        """Refuse at once inputs of known size that cannot fit on the job dir's disk (issue 26
        item 4): a download, or a cached file copied in (no hard link), needs its size there.

        Raises:
            StagingError: "no space left on the node to stage the inputs: need X, free Y".
        """
        need = sum(s.size or 0 for s in sources
                   if not (s.key and self.cache is not None and self.hardlink_ok and self.cache.get(s.key)))
        if not need:
            return
        try:
            space_check(self.job_dir, need, what="to stage the inputs")
        except NoSpace as exc:
            raise StagingError(str(exc)) from None

    def _size_from_cache(self, source: _Source) -> bool:
        if self.cache is None or source.key is None:
            return False
        hit = self.cache.get(source.key)
        if hit is None:
            return False
        source.size = hit[1].size
        return True

    def _check_file_root(self, url: str, path: str) -> None:
        real = os.path.realpath(path)
        if not any(is_within(real, root) for root in self.file_roots):
            raise StagingError(f"{url}: file:// is only allowed under the directories the node's operator allows")

    def _destination(self, source: _Source, name: str) -> Path:
        """Where a non-extracted source lands; see docs/agent-protocol.md, "Inputs"."""
        assert self.job_dir is not None
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
        assert self.job_dir is not None
        item = source.item
        if source.is_dir:
            self._stage_dir(source, sources)
            return
        local, name, owned = self._local(source, sources)
        try:
            if item.extract:
                try:
                    dest = resolve_inside(self.job_dir, item.target) if item.target else self.job_dir
                except UnsafePath as exc:
                    raise StagingError(f"{item.source}: target {exc}") from None
                try:
                    safe_extract(local, dest, limits=self.extract_limits)
                except ExtractError as exc:
                    raise StagingError(f"{item.source}: {exc}") from None
            else:
                dest = self._destination(source, name)
                if dest.is_symlink() or dest.is_dir():
                    raise StagingError(f"{item.source}: target {item.target!r} is in the way")
                dest.unlink(missing_ok=True)
                if owned:
                    shutil.move(local, dest)
                else:
                    how = link_or_copy(local, dest, hardlink_ok=self.hardlink_ok)
                    log.debug("%s: %s from the cache", redact_text(item.source), how)
        finally:
            if owned and local.exists():
                local.unlink()

    def _local(self, source: _Source, sources: list[_Source]) -> tuple[Path, str, bool]:
        """A local copy of the source: (path, file name, whether the caller owns it).

        A cache hit is returned as is (not owned). A fresh download goes into
        the cache when it has a key and fits, else it is handed to the caller.
        Two threads wanting the same key download it once: the second waits.
        """
        if self.cache is None or source.key is None:
            tmp, name = self._fetch(source, sources)
            return tmp, name, True
        try:
            return self._local_cached(source, sources, source.key)
        except FillAborted:
            raise StagingAborted() from None

    def _local_cached(self, source: _Source, sources: list[_Source], key: str) -> tuple[Path, str, bool]:
        assert self.cache is not None
        hit = self.cache.get(key)
        if hit is not None:
            return self._hit(source, sources, hit, downloaded=False)
        with self.cache.filling(key, should_stop=self.should_stop) as waited:
            hit = self.cache.get(key)
            if hit is not None:
                # it was not there a moment ago: waiting for a pre-stage to download it counts as downloading
                return self._hit(source, sources, hit, downloaded=waited)
            tmp, name = self._fetch(source, sources)
            kept = self.cache.add(key, tmp, name=name, sha256=source.item.sha256, source=source.item.source,
                                  identity=source.item.identity or "")
            if kept is None:
                return tmp, name, True
            return kept, name, False

    def _hit(self, source: _Source, sources: list[_Source], hit: tuple[Path, Any], *,
             downloaded: bool) -> tuple[Path, str, bool]:
        path, entry = hit
        source.size = entry.size
        self.done += entry.size
        if downloaded:
            self.fetched += entry.size
        else:
            self.cached += entry.size
        self.progress(self.done, self._total(sources))
        log.info("staging %s from the cache", redact_text(source.item.source))
        return path, entry.name or source.name, False

    def _fetch(self, source: _Source, sources: list[_Source]) -> tuple[Path, str]:
        """Download the source into a new file under ``tmp_dir``, with retries."""
        item = source.item
        backoff = Backoff()
        for attempt in range(1, TRIES + 1):
            tmp = self.tmp_dir / f"fetch-{uuid.uuid4().hex}"
            start, start_fetched = self.done, self.fetched
            try:
                return tmp, self._download(source, tmp, sources)
            except (StagingError, StagingAborted, Aborted, FileNotFoundError, PermissionError, ImportError):
                tmp.unlink(missing_ok=True)
                raise
            except ApiError as exc:
                tmp.unlink(missing_ok=True)
                raise StagingError(f"{item.source}: {exc.detail} (HTTP {exc.status})") from None
            except Exception as exc:  # network trouble half way: try again from the start
                tmp.unlink(missing_ok=True)
                self.done, self.fetched = start, start_fetched
                if self.should_stop():  # _abort_on_stop cut the transfer: a cancel, not a failure
                    raise StagingAborted() from None
                if attempt == TRIES:
                    raise StagingError(f"{item.source}: {exc}") from None
                log.warning("staging %s failed (%s), try %d of %d", redact_text(item.source),
                            redact_text(str(exc)), attempt, TRIES)
                if self.should_stop():
                    raise StagingAborted() from None
                time.sleep(backoff.next())
        raise AssertionError("unreachable")

    def _download(self, source: _Source, tmp: Path, sources: list[_Source]) -> str:
        """Copy the source into ``tmp`` with a running checksum; returns its file name.

        Raises :class:`StagingError` when the sha256 or the announced size differ.
        """
        item = source.item
        digest = hashlib.sha256()
        expected_size = source.size
        written = 0
        if item.source.startswith("upload:"):
            assert self.client is not None
            upload_id = item.source.removeprefix("upload:")
            with self.client.open_upload(upload_id) as (response, filename), _abort_on_stop(response, self.should_stop):
                name = _clean_name(filename) or source.name
                length = response.headers.get("Content-Length")
                source.size = expected_size = int(length) if length and length.isdigit() else None
                with open(tmp, "wb") as out:
                    for chunk in response.iter_bytes(CHUNK):
                        written += self._write(out, chunk, digest, sources)
        elif urlparse(item.source).scheme in WEB:
            name = source.name
            try:
                with guarded_request(item.source, self.net_policy) as response, \
                        _abort_on_stop(response, self.should_stop):
                    if response.status_code in (404, 410):
                        raise StagingError(f"{item.source}: not found (HTTP {response.status_code})")
                    if response.status_code >= 400:
                        raise StagingError(f"{item.source}: HTTP {response.status_code}")
                    with open(tmp, "wb") as out:
                        for chunk in response.iter_bytes(CHUNK):
                            written += self._write(out, chunk, digest, sources)
            except BlockedAddress as exc:
                raise StagingError(f"{item.source}: {exc}") from None
        else:
            fs, path = self._filesystem(item)
            name = source.name
            with _open(fs, path) as src, open(tmp, "wb") as out:
                # read1: what one read gives, so a source that trickles (a pipe, a slow mount) is
                # checked for a cancel after each piece, not after a whole CHUNK
                read = getattr(src, "read1", None) or src.read
                while chunk := read(CHUNK):
                    written += self._write(out, chunk, digest, sources)
        if item.sha256 and digest.hexdigest() != item.sha256:
            raise StagingError(
                f"{item.source}: sha256 mismatch: expected {item.sha256}, got {digest.hexdigest()}"
            )
        if source.key is not None and expected_size is not None and written != expected_size:
            raise StagingError(f"{item.source}: got {written} bytes, the source announced {expected_size}")
        return name

    def _stage_dir(self, source: _Source, sources: list[_Source]) -> None:
        """A directory source (``s3://bucket/prefix/``): every file under it, no cache."""
        item = source.item
        if item.extract or item.sha256:
            raise StagingError(f"{item.source}: a directory cannot be extracted or checksummed")
        fs, root = self._filesystem(item)
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

    def _write(self, out: IO[bytes], chunk: bytes, digest: Any, sources: list[_Source]) -> int:
        out.write(chunk)
        if digest is not None:
            digest.update(chunk)
        self.done += len(chunk)
        self.fetched += len(chunk)
        self.progress(self.done, self._total(sources))
        self._check_stop()
        return len(chunk)

    def _check_stop(self) -> None:
        if self.should_stop():
            raise StagingAborted()

    @staticmethod
    def _total(sources: list[_Source]) -> int | None:
        sizes = [s.size for s in sources]
        if any(size is None for size in sizes):
            return None
        return sum(size for size in sizes if size is not None)


ABORT_CHECK_S = 0.1  # how often a transfer in progress looks at ``should_stop``


@contextlib.contextmanager
def _abort_on_stop(response: httpx.Response, should_stop: Callable[[], bool]) -> Iterator[None]:
    """While the body of ``response`` is read, shut its socket down the moment ``should_stop()``
    says so: a cancel (or the deadline) ends a transfer at once, also one that trickles a byte at a
    time and would otherwise hold the read until its timeout. The read then fails, and the caller
    sees ``should_stop()`` and raises :class:`StagingAborted`."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(ABORT_CHECK_S):
            if should_stop():
                stream = response.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    watcher = threading.Thread(target=watch, name="staging-abort", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _naming:
    """Prefixes a :class:`StagingError` with the spec field it is about: ``data[2]: ...``."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if kind is not None and issubclass(kind, StagingError) and not str(exc).startswith("data["):
            raise StagingError(f"data[{self.index}]: {exc}") from None
        return False


class _errors:
    """Turns the OS errors of one input into a :class:`StagingError` naming it."""

    def __init__(self, source: _Source) -> None:
        self.source = source

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        what = self.source.item.source
        if kind is None or not issubclass(kind, (FileNotFoundError, PermissionError, ImportError)):
            return False
        if issubclass(kind, FileNotFoundError):
            raise StagingError(f"{what}: not found") from None
        if issubclass(kind, PermissionError):
            raise StagingError(f"{what}: permission denied{_anonymous_hint(self.source.item)}: {exc}") from None
        raise StagingError(f"{what}: needs a package on the agent: {exc}") from None


def _filesystem(url: str, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    import fsspec

    # skip_instance_cache: a filesystem made with one job's credentials is never reused for another's
    return fsspec.core.url_to_fs(url, **(options or {}), **({"skip_instance_cache": True} if options else {}))


def _anonymous_hint(item: DataItem) -> str:
    """Words for an access refused to an anonymous read."""
    if item.credentials or not item.source.startswith(("s3://", "gs://")):
        return ""
    return " (read anonymously: name a secret with data[i].credentials to read a private bucket)"


def _open(fs: Any, path: str) -> IO[bytes]:
    # block_size=0 streams http(s) instead of asking for ranges the server may not serve
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if {"file", "local"} & set(protocols):  # a plain open: a pipe or device reads as a stream (no seek)
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    if {"http", "https"} & set(protocols):
        return fs.open(path, "rb", block_size=0)
    return fs.open(path, "rb")


def _clean_name(name: str | None) -> str | None:
    """A server-given file name reduced to a plain basename."""
    if not name:
        return None
    base = posixpath.basename(name.replace("\\", "/")).strip()
    return base if base not in ("", ".", "..") and "\x00" not in base else None
