"""The per-node input cache: downloaded inputs kept across jobs, size-capped, LRU-evicted.

Layout under ``WORKDIR/cache/``: ``objects/<key>`` holds one input each
(read-only, mode 0444), ``index.json`` the entries (size in bytes, file
name, sha256 when known, last use as epoch seconds). The index is written
atomically (temporary file, fsync, rename) after every change, so it
survives an agent restart or a crash; files the index does not know (a
download cut by a crash, the layout of an older agent) are removed at
start.

Keys (:func:`key_for`): ``sha256-<hex>`` when the spec gives a checksum;
for other sources a hash of the URL with what the source says identifies
its version (ETag, generation, MD5, modification time) plus its size, so
a changed object gets a new key; ``upload:`` sources, which never change,
by site and id. A source that reports no validator has no key and is not
cached: what it serves may change behind the same name.

Entries a job is staging from, or a pre-stage is filling, are *pinned*
(:meth:`InputCache.pinned`) and never evicted; eviction takes the least
recently used unpinned entries until the total is within ``max_bytes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1000**3  # 50 GB; ``--cache-max-bytes`` changes it
INDEX = "index.json"
IDENTITIES_MAX = 1000  # inputs named in a heartbeat (the server keeps no more)
# fsspec ``info()`` fields that name an object's version, by backend (http, s3, gcs, local)
VALIDATORS = ("ETag", "etag", "generation", "md5Hash", "Content-MD5", "LastModified", "updated", "mtime")


class FillAborted(Exception):
    """Waiting for another thread's download of a key was given up (the job stops)."""


@dataclass
class Entry:
    """One cached input: ``size`` in bytes, ``last_used`` in epoch seconds."""

    key: str
    size: int
    name: str
    sha256: str | None
    last_used: float
    source: str = ""  # what it was fetched from (``upload:<id>``, a URL); "" in an index of an older agent


def key_for(source: str, *, sha256: str | None, info: dict[str, Any] | None, server: str = "") -> str | None:
    """The cache key of an input, or None when it must not be cached.

    ``info`` is what fsspec's ``info()`` said about the source (None when
    not asked); ``server`` is the site URL, which scopes ``upload:`` ids.
    """
    if sha256:
        return f"sha256-{sha256.lower()}"
    if source.startswith("upload:"):
        return "upload-" + hashlib.sha256(f"{server}|{source}".encode()).hexdigest()[:40]
    if not info or info.get("type") == "directory" or info.get("size") is None:
        return None
    version = next((f"{k}={info[k]}" for k in VALIDATORS if info.get(k) not in (None, "")), None)
    if version is None:
        return None
    return "url-" + hashlib.sha256(f"{source}|{version}|size={info['size']}".encode()).hexdigest()[:40]


class InputCache:
    """A size-capped, LRU-evicted store of inputs, safe to use from several threads.

    ``max_bytes`` caps the summed size of the entries (bytes). Raises
    ``OSError`` when ``root`` cannot be created.
    """

    def __init__(self, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.objects = root / "objects"
        self.max_bytes = max_bytes
        self._lock = threading.RLock()
        self._pins: Counter[str] = Counter()
        self._key_locks: dict[str, threading.Lock] = {}
        self.objects.mkdir(parents=True, exist_ok=True)
        self._entries = self._load()
        self._sweep()

    # -- reads ---------------------------------------------------------------

    def get(self, key: str) -> tuple[Path, Entry] | None:
        """The entry's file and record, marked as just used; None when absent or damaged."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            path = self.objects / key
            try:
                st = path.lstat()
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
                log.warning("cache entry %s is missing or damaged; dropping it", key)
                self._drop(key)
                self._save()
                return None
            entry.last_used = time.time()
            self._save()
            return path, entry

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    @property
    def total_bytes(self) -> int:
        """Summed size of the entries, in bytes."""
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def entries(self) -> list[Entry]:
        """A copy of the entries, least recently used first."""
        with self._lock:
            return sorted((Entry(**asdict(e)) for e in self._entries.values()), key=lambda e: e.last_used)

    def identities(self, limit: int = IDENTITIES_MAX) -> list[str]:
        """The inputs held, as the server names them (``apps.scheduling.core.matching.input_identity``),
        most recently used first, at most ``limit``: ``sha256-<hex>`` of an entry whose checksum is
        known and the source it was fetched from, when recorded; sent with each heartbeat."""
        out: dict[str, None] = {}
        with self._lock:
            for entry in sorted(self._entries.values(), key=lambda e: -e.last_used):
                if entry.sha256:
                    out[f"sha256-{entry.sha256.lower()}"] = None
                if entry.source:
                    out[entry.source] = None
                if len(out) >= limit:
                    break
        return list(out)[:limit]

    # -- writes --------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, keys: list[str]) -> Iterator[None]:
        """Keep ``keys`` from eviction for the ``with`` block (counted, so nesting works)."""
        with self._lock:
            self._pins.update(keys)
        try:
            yield
        finally:
            with self._lock:
                self._pins.subtract(keys)
                self._pins += Counter()  # drop the zeros

    @contextlib.contextmanager
    def filling(self, key: str, *, should_stop: Callable[[], bool] | None = None) -> Iterator[bool]:
        """Hold the one right to download ``key``: a second filler waits for the first,
        then finds the entry there (check :meth:`get` again inside the block).

        Yields True when it had to wait for another filler. Raises
        :class:`FillAborted` when ``should_stop()`` turns true while waiting.
        """
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        waited = not lock.acquire(blocking=False)
        if waited:
            while not lock.acquire(timeout=0.2):
                if should_stop is not None and should_stop():
                    raise FillAborted(key)
        try:
            yield waited
        finally:
            lock.release()

    def add(self, key: str, tmp: Path, *, name: str, sha256: str | None, source: str = "") -> Path | None:
        """Move the finished download ``tmp`` into the cache as ``key``; returns its new path.

        Evicts least recently used unpinned entries to stay within
        ``max_bytes``. Returns None, leaving ``tmp`` where it is, when the
        file alone is larger than the cap or the pinned entries leave no room.
        """
        size = tmp.stat().st_size
        with self._lock:
            if size > self.max_bytes or not self._make_room(size, keep=key):
                log.info("not caching %s (%d bytes): no room within %d bytes", key, size, self.max_bytes)
                return None
            path = self.objects / key
            os.chmod(tmp, 0o444)  # the job gets copies or links; nobody writes a cached file
            os.replace(tmp, path)
            self._entries[key] = Entry(key=key, size=size, name=name, sha256=sha256, last_used=time.time(),
                                       source=source)
            self._save()
            return path

    def evict(self, key: str) -> None:
        """Remove one entry (e.g. found corrupt), pinned or not."""
        with self._lock:
            self._drop(key)
            self._save()

    # -- inside ----------------------------------------------------------------

    def _make_room(self, size: int, *, keep: str) -> bool:
        """Evict LRU unpinned entries until ``size`` more bytes fit; False if they cannot."""
        total = sum(e.size for k, e in self._entries.items() if k != keep)
        if total + size <= self.max_bytes:
            return True
        for entry in sorted(self._entries.values(), key=lambda e: e.last_used):
            if entry.key == keep or self._pins[entry.key] > 0:
                continue
            log.info("cache full: evicting %s (%d bytes, last used %.0f s ago)", entry.key, entry.size,
                     time.time() - entry.last_used)
            self._drop(entry.key)
            total -= entry.size
            if total + size <= self.max_bytes:
                break
        self._save()
        return total + size <= self.max_bytes

    def _drop(self, key: str) -> None:
        self._entries.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            (self.objects / key).unlink()

    def _load(self) -> dict[str, Entry]:
        try:
            raw = json.loads((self.root / INDEX).read_text())
            return {k: Entry(key=k, source=str(v.get("source") or ""),
                             **{f: v[f] for f in ("size", "name", "sha256", "last_used")})
                    for k, v in raw.get("entries", {}).items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cache index unreadable (%s); starting an empty cache", exc)
            return {}

    def _sweep(self) -> None:
        """Drop index entries without a file and files without an index entry (and older layouts)."""
        for key in [k for k in self._entries if not (self.objects / k).is_file()]:
            del self._entries[key]
        for path in self.objects.iterdir():
            if path.name not in self._entries:
                _remove(path)
        for path in self.root.iterdir():
            if path.name not in ("objects", INDEX):
                _remove(path)
        self._make_room(0, keep="")
        self._save()

    def _save(self) -> None:
        """Write the index atomically: a crash leaves the old or the new one, never half of one."""
        data = {"version": 1, "entries": {k: {f: v for f, v in asdict(e).items() if f != "key"}
                                          for k, e in self._entries.items()}}
        tmp = self.root / f".{INDEX}.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / INDEX)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def link_or_copy(src: Path, dest: Path, *, hardlink_ok: bool) -> str:
    """Put the cached file ``src`` at ``dest`` so the job cannot change the cache through it.

    A reflink (copy-on-write clone, ``FICLONE``: btrfs, XFS) when the
    filesystem has one; else a hard link when ``hardlink_ok`` (the job runs
    as a user who cannot write the read-only cached file); else a plain copy.
    Returns ``"reflink"``, ``"hardlink"`` or ``"copy"``. Raises ``OSError``.
    """
    if _reflink(src, dest):
        return "reflink"
    if hardlink_ok:
        try:
            os.link(src, dest)
            return "hardlink"
        except OSError:
            pass
    shutil.copyfile(src, dest)
    return "copy"


FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int)


def _reflink(src: Path, dest: Path) -> bool:
    try:
        import fcntl
    except ImportError:  # not on Linux
        return False
    try:
        with open(src, "rb") as s, open(dest, "wb") as d:
            try:
                fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
                return True
            except OSError:
                pass
    except OSError:
        return False
    dest.unlink(missing_ok=True)
    return False
