"""The per-node input cache: downloaded inputs kept across jobs, size-capped, LRU-evicted.

Layout under ``WORKDIR/cache/``: ``objects/<key>`` holds one input each
(read-only, mode 0444), ``index.json`` the entries (size in bytes, file
name, sha256 when known, last use as epoch seconds, the input's identity
and its source with credentials shown as ``***``). The index is written
atomically (temporary file, fsync, rename) after every change, so it
survives an agent restart or a crash; files the index does not know (a
download cut by a crash, the layout of an older agent) are removed at
start.

Who may be served an entry (issue 23 item 1): an entry belongs to one input
*identity* (:func:`e31_protocol.inputs.input_identity`: an upload with its
owner, a URL with the credentials it was read with), and its key
(:func:`key_for`) is a hash of that identity with the version of the bytes:
the spec's sha256 when given, the version the source reports (ETag,
generation, MD5, modification time) plus its size for other URLs, nothing
more for an upload (which never changes). A job whose input has another
identity computes another key and never finds the entry: the lookup is the
same miss as for anything not cached, so staging time reveals nothing
either. A spec's sha256 only checks the bytes. An input without an
identity (an upload from a server that sent no ``input_scope``) or a
source that reports no version is not cached.

Index version 2 holds identity keys. An index of an older agent (version 1,
keyed by the digest alone) is dropped whole at start, its files with it: no
digest-keyed entry is reachable after an upgrade.

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

from e31_protocol.inputs import display_source, is_upload

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1000**3  # 50 GB; ``--cache-max-bytes`` changes it
INDEX = "index.json"
INDEX_VERSION = 2  # 2: keys from input identities (issue 23); 1: keyed by the digest alone, dropped at start
KEY_PREFIX = "c2-"
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
    source: str = ""  # what it was fetched from, credentials shown as *** (e31_protocol.inputs.display_source)
    identity: str = ""  # e31_protocol.inputs.input_identity of the input; "" for an entry made without one


def key_for(identity: str | None, *, source: str, sha256: str | None, info: dict[str, Any] | None,
            server: str = "") -> str | None:
    """The cache key of an input, ``c2-<40 hex>``, or None when it must not be cached.

    ``identity`` is the input's :func:`e31_protocol.inputs.input_identity` (None: not to be
    shared, so not cached); ``source`` its ``spec.data[i].source``; ``info`` what fsspec's
    ``info()`` said about the source (None when not asked); ``server`` the site URL, which
    scopes ``upload:`` ids. The version part is ``sha256=<hex>`` when the spec gives one (no
    need to ask the source), nothing for an upload, else the source's validator and size
    (:data:`VALIDATORS`); a URL reporting neither is not cached.
    """
    if not identity:
        return None
    parts = [identity, server if is_upload(source) else ""]  # upload ids are one site's
    if sha256:
        parts.append(f"sha256={sha256.lower()}")
    elif not is_upload(source):
        if not info or info.get("type") == "directory" or info.get("size") is None:
            return None
        validator = next((f"{k}={info[k]}" for k in VALIDATORS if info.get(k) not in (None, "")), None)
        if validator is None:
            return None
        parts.append(f"{validator}|size={info['size']}")
    return KEY_PREFIX + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:40]


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
        """The input identities held (:func:`e31_protocol.inputs.input_identity`, as the server
        names a queued job's inputs), most recently used first, each once, at most ``limit``;
        sent with each heartbeat (``cached_inputs``). No digest, source or account is in them."""
        out: dict[str, None] = {}
        with self._lock:
            for entry in sorted(self._entries.values(), key=lambda e: -e.last_used):
                if entry.identity:
                    out[entry.identity] = None
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

    def add(self, key: str, tmp: Path, *, name: str, sha256: str | None, source: str = "",
            identity: str = "") -> Path | None:
        """Move the finished download ``tmp`` into the cache as ``key``; returns its new path.

        ``identity`` is the input's identity (reported to the server), ``source`` where it came
        from (kept with credentials shown as ``***``).

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
                                       source=display_source(source) if source else "", identity=identity)
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
        """The index's entries; none from an index of another version (its files are then swept)."""
        try:
            raw = json.loads((self.root / INDEX).read_text())
            if raw.get("version") != INDEX_VERSION:
                log.warning("dropping %d cache entries of an older agent (index version %s, keyed by "
                            "digest): they are fetched again", len(raw.get("entries") or {}), raw.get("version"))
                return {}
            return {k: Entry(key=k, source=str(v.get("source") or ""), identity=str(v.get("identity") or ""),
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
        data = {"version": INDEX_VERSION, "entries": {k: {f: v for f, v in asdict(e).items() if f != "key"}
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
