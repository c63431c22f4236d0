"""Collecting a job's declared outputs into ``bundle.tar.gz`` with a manifest.

``spec.output.paths`` are globs relative to the job dir: ``*`` and ``?``
within one path segment, ``**`` across any number of them; a pattern that
names a directory takes everything under it. A link whose target lies
outside the job dir is never followed nor packed; a link to a file inside
is packed as that file's content under the link's path; links to
directories are not descended (their files are packed where they really are).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .models import FileEntry
from .paths import is_within

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Bundle:
    """A packed bundle: the archive, its size (bytes), sha256 and file list."""

    path: Path
    size_bytes: int
    sha256: str
    files: list[FileEntry]


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


def collect(job_dir: Path, patterns: list[str]) -> list[tuple[str, Path]]:
    """The files to pack: (path relative to the job dir, path to read), sorted."""
    regexes = [glob_regex(p) for p in patterns if p.strip()]
    if not regexes:
        return []
    root = os.path.realpath(job_dir)
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if not _matches(rel, regexes):
                continue
            if rel == MANIFEST:
                log.warning("job output %s is reserved for the bundle's manifest; not packed", rel)
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                if not is_within(full, root):
                    log.warning("not packing %s: link leads outside the job dir", rel)
                    continue
                real = os.path.realpath(full)
                if not os.path.isfile(real):
                    continue
                found.append((rel, Path(real)))
            elif stat.S_ISREG(st.st_mode):
                found.append((rel, Path(full)))
    found.sort()
    return found


class _HashingReader:
    """Reads from a file while computing its sha256 and counting bytes."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.hash = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.hash.update(data)
        self.size += len(data)
        return data


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB steps."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pack(job_dir: Path, patterns: list[str], bundle_path: Path, *, job_id: int) -> Bundle:
    """Write ``bundle_path`` (a ``.tar.gz``): the collected outputs plus ``manifest.json``.

    The manifest, ``{"job_id", "files": [{"path", "size_bytes", "sha256"}]}``,
    sits at the archive's root. The archive is reproducible for the same
    files (gzip timestamp 0, fixed owners). Raises ``OSError``.
    """
    files = collect(job_dir, patterns)
    bundle_path.parent.mkdir(parents=True, exist_ok=True)
    entries: list[FileEntry] = []
    with (
        open(bundle_path, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, real in files:
            with open(real, "rb") as fh:
                st = os.fstat(fh.fileno())
                info = _info(rel, st.st_size, int(st.st_mtime), executable=bool(st.st_mode & 0o100))
                reader = _HashingReader(fh)
                tar.addfile(info, reader)  # type: ignore[arg-type]
            entries.append(FileEntry(rel, reader.size, reader.hash.hexdigest()))
        manifest = {"job_id": job_id, "files": [e.to_json() for e in entries]}
        data = json.dumps(manifest, indent=1).encode()
        tar.addfile(_info(MANIFEST, len(data), 0), io.BytesIO(data))
    return Bundle(
        path=bundle_path,
        size_bytes=bundle_path.stat().st_size,
        sha256=file_sha256(bundle_path),
        files=entries,
    )


def _info(name: str, size: int, mtime: int, *, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
