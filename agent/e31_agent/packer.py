"""Collecting a job's declared outputs into ``bundle.tar`` with a manifest.

Issue 15 item 2, packing at disk speed: the archive is an *uncompressed* POSIX
(pax) tar, read by any tar (``tar xf``), in which each file's bytes lie whole at
a known offset, so the server can answer for one file with a Range read of the
stored archive without unpacking anything (issue 16 item 2). Each file is read
once, in 4 MiB blocks: the block is hashed for the file's sha256 and for the
archive's in two worker threads while it is written (:class:`_ArchiveOut`).
gzip level 1 spent 95 % of the time (42-45 MB/s against a sha256 at ~1,280
MB/s) to shrink weights, checkpoints and video by nothing; the compressible
outputs (logs, metrics, CSV) are small next to them. Why no per-file zstd:
``docs/SPEC.md`` ("Bundles").

Packing starts only after the job's whole process group has exited (the
caller's contract). ``spec.output.paths`` are globs relative to the job
dir: ``*`` and ``?`` within one path segment, ``**`` across any number of
them; a pattern that names a directory takes everything under it. A
pattern with ``..`` or an absolute path is refused (:class:`PackError`).

Only regular files and directories under the job dir are looked at: links
are never followed, neither to a file nor to a directory, whether they
lead out of the job dir or stay inside; FIFOs, sockets and device files are
skipped without being opened. The walk holds each directory open
(``os.fwalk``) and opens each file relative to it with ``O_NOFOLLOW``, so a
path swapped for a link while packing still reads nothing outside. The
summed size of the files is capped (``max_bytes``) with a clear error.

Issue 11: files are opened one at a time while the archive is written (never
more than one output file and a directory or two open, whatever the count:
50,000 outputs once ran the agent out of descriptors and dropped 30,011 of them
silently). The number of files and their bytes are capped
(:class:`OutputLimits`); past a cap nothing is packed and :class:`PackError`
says which cap. A *hard link* whose other links are not all inside the job dir
(``st_nlink`` greater than the links to that inode found in the job dir) is
not packed: it may be a file of the agent's that the job could not read (the
packer reads with the agent's rights). Such a file, or one that vanished or
could not be read meanwhile, is listed in :attr:`Bundle.not_packed`, and the
job's ``finished`` report says so (``outputs not packed: ...``): the server then
records the outcome ``failed`` with that reason, never ``succeeded`` with files
missing. Links, FIFOs, sockets and devices are never packed (they are not
outputs: the walk skips them, as before).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import stat
import tarfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .diskspace import NoSpace, space_check
from .models import FileEntry
from .paths import UnsafePath, check_relative

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = "tar"  # manifest.json's "format": the archive is an uncompressed POSIX (pax) tar
BLOCK_BYTES = 4 << 20  # one read, hash and write step of a large file
BUFFERS = 3  # blocks in flight: one being read while the others are hashed and written
SMALL_BYTES = 1 << 20  # a file up to this is read whole and staged with the headers
STAGE_BYTES = 1 << 20  # staged headers and small files are written once they reach this


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().replace("_", "")
    return int(raw) if raw.isdigit() else default


@dataclass(frozen=True)
class OutputLimits:
    """Caps on one job's outputs (agent flags ``--output-max-files`` / ``--output-max-bytes``,
    or ``$E31_AGENT_OUTPUT_MAX_FILES`` / ``_BYTES``). ``max_bytes`` None: only the site's cap
    (the assignment's ``output_max_bytes``) applies; the smaller of the two wins."""

    max_files: int = 100_000
    max_bytes: int | None = None

    @classmethod
    def from_env(cls) -> OutputLimits:
        raw = _env_int("E31_AGENT_OUTPUT_MAX_BYTES", 0)
        return cls(max_files=_env_int("E31_AGENT_OUTPUT_MAX_FILES", cls.max_files), max_bytes=raw or None)


@dataclass(frozen=True)
class Bundle:
    """A packed bundle: the archive, its size (bytes), sha256 and file list.

    ``not_packed``: declared files left out, each ``"path (why)"`` (a hard link
    to a file outside the job dir, a file gone or unreadable while packing).
    ``unmatched``: the declared output paths/globs that matched no file, as declared.
    """

    path: Path
    size_bytes: int
    sha256: str
    files: list[FileEntry]
    not_packed: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a job-dir glob (``checkpoints/**``, ``**/*.json``) to a regex."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    parts = [p for p in pattern.strip("/").split("/") if p not in ("", ".")]
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:.*/)?")
        else:
            out.append(_segment(part) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _segment(part: str) -> str:
    out = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = part.find("]", i + 2)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = part[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _matches(rel: str, regexes: list[re.Pattern[str]]) -> bool:
    # the path itself or one of its parent directories ("checkpoints" takes the tree)
    candidates = [rel]
    parts = rel.split("/")
    candidates += ["/".join(parts[:n]) for n in range(1, len(parts))]
    return any(rx.match(c) for rx in regexes for c in candidates)


class PackError(OSError):
    """The outputs cannot be packed as declared (unsafe pattern, over the size cap)."""


def check_patterns(patterns: list[str]) -> list[str]:
    """The non-empty patterns; raises :class:`PackError` for ``..`` or an absolute path."""
    out = []
    for pattern in patterns:
        if not pattern.strip():
            continue
        try:
            check_relative(pattern.strip())
        except UnsafePath as exc:
            raise PackError(f"output path {exc}") from None
        out.append(pattern)
    return out


def collect(job_dir: Path, patterns: list[str]) -> list[tuple[str, Path]]:
    """The files to pack: (path relative to the job dir, its path under the job dir), sorted.

    Regular files only, found without following any link (see the module
    docstring). Raises :class:`PackError` for an unsafe pattern.
    """
    regexes = [glob_regex(p) for p in check_patterns(patterns)]
    if not regexes:
        return []
    return [(rel, path) for rel, path, _st in _collect(job_dir, regexes)[0]]


# What the agent itself writes into the job dir for the command (the gang's MPI hostfile): never an
# output, whatever the globs say.
HOSTFILE = ".e31_hostfile"
PLATFORM_FILES = frozenset({HOSTFILE})


def _collect(job_dir: Path, regexes: list[re.Pattern[str]]
             ) -> tuple[list[tuple[str, Path, os.stat_result]], dict[tuple[int, int], int]]:
    """:func:`collect` with each file's ``lstat``, and how many links to each inode of more
    than one link the whole job dir holds (matched or not)."""
    root = os.path.realpath(job_dir)
    found: list[tuple[str, Path, os.stat_result]] = []
    links_inside: dict[tuple[int, int], int] = {}
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if _is_link(d, dirfd)]):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                links_inside[(st.st_dev, st.st_ino)] = links_inside.get((st.st_dev, st.st_ino), 0) + 1
            if not _matches(rel, regexes):
                continue
            if stat.S_ISLNK(st.st_mode):
                log.warning("not packing %s: links are never followed", rel)
            elif not stat.S_ISREG(st.st_mode):
                log.warning("not packing %s: not a regular file (FIFO, socket or device)", rel)
            elif rel == MANIFEST:
                log.warning("job output %s is reserved for the bundle's manifest; not packed", rel)
            else:
                found.append((rel, Path(full), st))
    found.sort(key=lambda f: f[0])
    return found, links_inside


def _is_link(name: str, dirfd: int) -> bool:
    """A name ``fwalk`` lists among the directories that is a link to one (never descended)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_regular(root: str, rel: str) -> IO[bytes] | None:
    """Open ``root/rel`` for reading without following a link in any part; None if it is not a
    regular file (any more)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    dir_flags = flags | getattr(os, "O_DIRECTORY", 0)
    fds = [os.open(root, dir_flags)]
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            fds.append(os.open(part, dir_flags, dir_fd=fds[-1]))
        fd = os.open(parts[-1], flags, dir_fd=fds[-1])
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link now (O_NOFOLLOW)
            return None
        raise
    finally:
        for d in fds:
            os.close(d)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB steps."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pack(
    job_dir: Path, patterns: list[str], bundle_path: Path, *, job_id: int, max_bytes: int | None = None,
    limits: OutputLimits | None = None,
) -> Bundle:
    """Write ``bundle_path`` (an uncompressed pax ``.tar``): the collected outputs plus ``manifest.json``.

    The manifest, ``{"job_id", "format": "tar", "files": [{"path", "size_bytes", "sha256",
    "offset"}]}``, is the archive's last member (``offset``: where the file's bytes start
    in the archive, so ``archive[offset:offset + size_bytes]`` is the file). The archive is
    reproducible for the same files (fixed owners and modes, the files' own mtimes); it and
    every file are hashed while they are written, each byte read once. ``max_bytes`` (the
    site's cap) and ``limits`` cap the number of files and their summed size. Files are
    opened one at a time. Raises :class:`PackError` (unsafe pattern, over a cap, a file
    that shrank while read) and ``OSError``.
    """
    limits = limits or OutputLimits.from_env()
    declared = check_patterns(patterns)
    regexes = [glob_regex(p) for p in declared]
    files, links_inside = _collect(job_dir, regexes) if regexes else ([], {})
    files = [f for f in files if f[0] not in PLATFORM_FILES]
    unmatched = unmatched_patterns(declared, regexes, [rel for rel, _path, _st in files])
    if unmatched:
        log.warning("declared outputs that matched no file: %s", ", ".join(unmatched))
    caps = [c for c in (max_bytes, limits.max_bytes) if c is not None]
    cap = min(caps) if caps else None
    total = sum(st.st_size for _rel, _path, st in files)
    if len(files) > limits.max_files:
        raise PackError(f"{len(files):,} output files is over the cap of {limits.max_files:,} files a job may"
                        " return; nothing was packed")
    if cap is not None and total > cap:
        raise PackError(f"the declared outputs hold {total:,} bytes; the most a bundle may hold is {cap:,} bytes;"
                        " nothing was packed")
    try:
        space_check(bundle_path.parent, tar_bytes(total, len(files)), what="to pack the outputs")
    except NoSpace as exc:
        raise PackError(str(exc)) from None
    root = os.path.realpath(job_dir)
    not_packed = []
    wanted = []
    for rel, _path, st in files:
        inside = links_inside.get((st.st_dev, st.st_ino), 1)
        refusal = name_refusal(rel)
        if refusal:
            log.warning("not packing %s: %s", printable_name(rel), refusal)
            not_packed.append(f"{printable_name(rel)} ({refusal})")
        elif st.st_nlink > inside:
            log.warning("not packing %s: a hard link (%d links, %d in the job dir)", rel, st.st_nlink, inside)
            not_packed.append(f"{rel} (a hard link to a file outside the job dir)")
        else:
            wanted.append(rel)
    bundle = _write(bundle_path, root, wanted, job_id=job_id, budget=cap, links_inside=links_inside)
    return Bundle(bundle.path, bundle.size_bytes, bundle.sha256, bundle.files, (*not_packed, *bundle.not_packed),
                  unmatched)


def tar_bytes(content_bytes: int, files: int) -> int:
    """An upper bound of the bundle's size (bytes): the files, a 512-byte header, a pax header and
    padding each, the manifest and the end blocks."""
    return content_bytes + files * 2048 + 1024 * 1024


def name_refusal(rel: str) -> str | None:
    """Why an output path cannot travel in a bundle, or None. A name must be UTF-8 (the manifest and
    the report are JSON, the pages HTML) and hold no control character (a CR or LF broke the files
    list and the job page; issue 26): such a file is left out and named in ``not_packed``."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return "its name holds a control character"
    return None


def printable_name(rel: str) -> str:
    """``rel`` as safe text: bytes that are not UTF-8 as ``\\xNN``, control characters as ``\\xNN``."""
    text = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c for c in text)


def unmatched_patterns(patterns: list[str], regexes: list[re.Pattern[str]], rels: list[str]) -> tuple[str, ...]:
    """The declared ``patterns`` (each compiled in ``regexes``) that match none of the files
    found (``rels``, relative to the job dir; a file matches a pattern that names it or one of
    its parent directories, as packing does)."""
    return tuple(p.strip() for p, rx in zip(patterns, regexes, strict=True) if not any(_matches(rel, [rx])
                                                                                    for rel in rels))


def _write(bundle_path: Path, root: str, rels: list[str], *, job_id: int, budget: int | None,
           links_inside: dict[tuple[int, int], int]) -> Bundle:
    """Archive ``rels`` (paths under ``root``), each opened, read and closed in turn.

    A file that is no longer a regular file, became a hard link with links
    outside, or cannot be opened is left out and listed in ``not_packed``.
    ``budget``: bytes the files may hold together (a file that grew past it
    raises :class:`PackError`; so does one that shrank while being read: its
    header already holds its size). On any error the partial archive is removed.
    """
    bundle_path.parent.mkdir(parents=True, exist_ok=True)
    entries: list[tuple[str, int, int, str | Future[str]]] = []  # path, size, data offset, sha256
    not_packed: list[str] = []
    written = 0
    ok = False
    with open(bundle_path, "wb", buffering=0) as raw_file, _ArchiveOut(raw_file) as out:
        try:
            for rel in rels:
                try:
                    fh = _open_regular(root, rel)
                except OSError as exc:
                    fh, why = None, f"cannot be read: {exc.strerror or exc}"
                else:
                    why = "no longer a regular file"
                if fh is None:
                    log.warning("not packing %s: %s", rel, why)
                    not_packed.append(f"{rel} ({why})")
                    continue
                with fh:
                    st = os.fstat(fh.fileno())
                    if st.st_nlink > links_inside.get((st.st_dev, st.st_ino), 1):
                        not_packed.append(f"{rel} (a hard link to a file outside the job dir)")
                        continue
                    if budget is not None and written + st.st_size > budget:
                        raise PackError(f"the declared outputs grew past {budget:,} bytes while being packed")
                    info = _info(rel, st.st_size, int(st.st_mtime), executable=bool(st.st_mode & 0o100))
                    out.small(_header(info))
                    offset = out.pos
                    digest = out.copy_file(fh.fileno(), st.st_size, rel)
                    written += st.st_size
                    entries.append((rel, st.st_size, offset, digest))
            files = [FileEntry(rel, size, digest if isinstance(digest, str) else digest.result(), offset)
                     for rel, size, offset, digest in entries]
            manifest = {"job_id": job_id, "format": FORMAT, "files": [e.to_json() for e in files]}
            data = json.dumps(manifest, indent=1).encode()
            out.small(_header(_info(MANIFEST, len(data), 0)))
            out.small(data)
            out.pad()
            out.end()
            ok = True
        finally:
            if not ok:
                out.abandon()
                bundle_path.unlink(missing_ok=True)
    return Bundle(path=bundle_path, size_bytes=out.pos, sha256=out.hexdigest, files=files,
                  not_packed=tuple(not_packed))


def _header(info: tarfile.TarInfo) -> bytes:
    """The header block(s) of ``info`` (a pax extended header first when the name or size needs one)."""
    return info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


def _info(name: str, size: int, mtime: int, *, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _ArchiveOut:
    """The archive as it is written: sequential writes, every byte hashed (sha256) once.

    Hashing runs in two worker threads (``hashlib`` releases the GIL on large updates): one
    hashes the archive, the other the file being copied, while this thread reads the next
    block and writes the last. Files up to ``SMALL_BYTES`` are read whole and hashed here, and
    their bytes are staged with the headers and written together (fewer writes and thread
    hand-offs for many small files). Large files go through a ring of ``BUFFERS`` blocks of
    ``BLOCK_BYTES``: a block is refilled only once both its hashes are done.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self.fd = raw.fileno()
        self.pos = 0  # bytes of the archive so far (written or staged)
        self.hexdigest = ""
        self._hash = hashlib.sha256()
        self._staged = bytearray()
        self._archive_pool = ThreadPoolExecutor(1, thread_name_prefix="pack-archive-sha")
        self._file_pool = ThreadPoolExecutor(1, thread_name_prefix="pack-file-sha")
        self._ring = [bytearray(BLOCK_BYTES) for _ in range(BUFFERS)]
        self._busy: list[list[Future[Any]]] = [[] for _ in range(BUFFERS)]
        self._next = 0

    def __enter__(self) -> _ArchiveOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self._archive_pool.shutdown(wait=True)
        self._file_pool.shutdown(wait=True)

    def small(self, data: bytes) -> None:
        """Append ``data`` (a header, a small file, padding) to the staged bytes."""
        self._staged += data
        self.pos += len(data)
        if len(self._staged) >= STAGE_BYTES:
            self._flush()

    def pad(self) -> None:
        """Zeros up to the next 512-byte block (the end of a member's data)."""
        if self.pos % tarfile.BLOCKSIZE:
            self.small(tarfile.NUL * (tarfile.BLOCKSIZE - self.pos % tarfile.BLOCKSIZE))

    def copy_file(self, fd: int, size: int, rel: str) -> str | Future[str]:
        """Append ``size`` bytes read from ``fd`` and the padding after them; the file's hex
        sha256 (or a future of it, for a large file, resolved once its last block is hashed).

        Raises :class:`PackError` when the file ends before ``size`` bytes (it shrank)."""
        if size <= SMALL_BYTES:
            data = _read_exactly(fd, size, rel)
            self.small(data)
            self.pad()
            return hashlib.sha256(data).hexdigest()
        self._flush()
        digest = hashlib.sha256()
        left = size
        while left:
            slot = self._next
            self._next = (slot + 1) % BUFFERS
            for fut in self._busy[slot]:
                fut.result()
            view = memoryview(self._ring[slot])[: min(BLOCK_BYTES, left)]
            _read_into(fd, view, rel)
            self._busy[slot] = [self._file_pool.submit(digest.update, view), self._out(view)]
            left -= len(view)
            self.pos += len(view)
        self.pad()
        return self._file_pool.submit(digest.hexdigest)

    def end(self) -> None:
        """The end-of-archive marker (two zero blocks), zeros to a whole tar record, and the
        archive's sha256 in :attr:`hexdigest` once every byte is written and hashed."""
        self.small(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        if self.pos % tarfile.RECORDSIZE:
            self.small(tarfile.NUL * (tarfile.RECORDSIZE - self.pos % tarfile.RECORDSIZE))
        self._flush()
        self.hexdigest = self._archive_pool.submit(self._hash.hexdigest).result()

    def abandon(self) -> None:
        """Wait for the hashes in flight (they read the ring's blocks), dropping their results."""
        for futures in self._busy:
            for fut in futures:
                fut.exception()

    def _flush(self) -> None:
        if self._staged:
            data = bytes(self._staged)
            self._staged.clear()
            self._out(data)

    def _out(self, data: bytes | memoryview) -> Future[None]:
        fut = self._archive_pool.submit(self._hash.update, data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        return fut


def _read_exactly(fd: int, size: int, rel: str) -> bytes:
    """``size`` bytes from ``fd`` (a small file, read whole)."""
    parts = []
    left = size
    while left:
        data = os.read(fd, left)
        if not data:
            raise PackError(f"{rel} shrank while being packed")
        parts.append(data)
        left -= len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_into(fd: int, view: memoryview, rel: str) -> None:
    """Fill ``view`` from ``fd``."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if not n:
            raise PackError(f"{rel} shrank while being packed")
        got += n
