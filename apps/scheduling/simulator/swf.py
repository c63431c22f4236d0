"""Reading Standard Workload Format traces and mapping their jobs onto GPUs.

SWF v2.2 (Parallel Workloads Archive, https://www.cs.huji.ac.il/labs/parallel/workload/swf.html):
one job a line, 18 whitespace-separated fields, ``-1`` where unknown; header
and comment lines begin with ``;``. The file may be gzip-compressed (found by
its magic bytes, not its name).

Mapping (E31, SPEC §5): one processor = one GPU; a job asks what the user
*requested* (field 8), the allocated processors (field 5) only where the
request is unknown (issue 14: on some logs field 5 counts nodes, not
processors, and shrinks the job); a job of ``n <= G``
processors takes ``n`` GPUs on one node, a larger one ``ceil(n / G)`` whole
nodes of ``G``; the requested time (field 9) is the time limit (a job without one
gets its run time); the run time is the actual run, cut at the limit; the
user id is the renting account.
"""
from __future__ import annotations

import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class SwfRecord:
    """One SWF line, the fields the simulator reads (1-based field numbers in comments)."""

    job_id: int  # 1
    submit: int  # 2, s from log start
    wait: int  # 3, what the real scheduler achieved; -1 unknown
    run: int  # 4; -1 unknown
    processors: int  # 5, allocated; -1 unknown
    requested_processors: int  # 8
    requested_time: int  # 9, the user's time limit; -1 unknown
    status: int  # 11
    user: int  # 12
    group: int = -1  # 13, the user's group: the fair-share project with ``projects`` (issue 25 item 4)

    @property
    def procs(self) -> int:
        """Processors the job asks: requested (field 8), else allocated (field 5); <= 0 unknown.

        What the user asked is what a scheduler sees when it decides; the
        allocation is the outcome (and on some logs a node count).
        """
        return self.requested_processors if self.requested_processors > 0 else self.processors


@dataclass(frozen=True)
class TraceJob:
    """A trace job mapped onto GPUs: what the simulator replays."""

    job_id: int
    account: str
    submit: float
    gpus: int  # processors asked, = GPUs (for the size classes)
    gpus_per_node: int
    nodes: int
    time_limit_s: int
    run_s: float  # actual run, cut at the limit
    recorded_wait_s: float | None  # field 3, None when unknown
    # A trace asks only for its size: any GPU model, no memory or CPU minimum, no image, no boost
    # (the requirement columns the one JobRequest builder reads, apps.scheduling.core.requests).
    gpu_models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    cpus: int = 0
    memory_mib: int = 0
    needs_runtime: bool = False
    priority_boost: int = 0
    mixed_models: bool = False  # one GPU model in a replay's pool: no gang ever mixes models
    project: str = ""  # fair-share project: "g<group>" (field 13) with ``projects``; "": the user's own

    @property
    def gpus_held(self) -> int:
        """GPUs the job occupies: ``n`` on one node, or whole nodes."""
        return self.gpus_per_node * self.nodes


def open_text(path: str | Path) -> io.TextIOBase:
    """Open ``path`` for reading as text, gzip or plain."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def parse_line(line: str) -> SwfRecord | None:
    """One data line to a record; None for a comment, blank or short line."""
    line = line.strip()
    if not line or line.startswith(";"):
        return None
    f = line.split()
    if len(f) < 12:
        return None
    n = [int(float(x)) for x in f[:13]]
    return SwfRecord(job_id=n[0], submit=n[1], wait=n[2], run=n[3], processors=n[4],
                     requested_processors=n[7], requested_time=n[8], status=n[10], user=n[11],
                     group=n[12] if len(n) > 12 else -1)


def read_swf(path: str | Path) -> Iterator[SwfRecord]:
    """Every job line of an SWF file (gzip or plain), in file order."""
    with open_text(path) as fh:
        for line in fh:
            rec = parse_line(line)
            if rec is not None:
                yield rec


def header(path: str | Path) -> dict[str, str]:
    """The ``; Key: value`` header lines (first of each key)."""
    out: dict[str, str] = {}
    with open_text(path) as fh:
        for line in fh:
            if not line.startswith(";"):
                if line.strip():
                    break
                continue
            key, sep, value = line[1:].partition(":")
            if sep and key.strip() and key.strip() not in out:
                out[key.strip()] = value.strip()
    return out


def skip_reason(rec: SwfRecord) -> str | None:
    """Why a record is not replayed: ``run<0`` or ``processors<=0`` (requested and allocated); None if it is."""
    if rec.run < 0:
        return "run<0"
    if rec.procs <= 0:
        return "processors<=0"
    return None


def project_of(rec: SwfRecord) -> str:
    """The fair-share project of a record: ``g<group>`` (SWF field 13, the user's group); ""
    (the user's personal project) where the group is unknown."""
    return f"g{rec.group}" if rec.group >= 0 else ""


def map_job(rec: SwfRecord, gpus_per_node: int, *, projects: bool = False) -> TraceJob:
    """Map one valid record onto GPUs (see the module docstring); with ``projects`` the job
    belongs to its group's project (:func:`project_of`), else to its user's personal one.

    A time limit below 1 s (a job of run 0 without a limit) becomes 1 s, so
    that a job always holds its GPUs for the rest of the cycle that places it.
    """
    n = rec.procs
    if n <= gpus_per_node:
        per_node, nodes = n, 1
    else:
        per_node, nodes = gpus_per_node, math.ceil(n / gpus_per_node)
    limit = rec.requested_time if rec.requested_time > 0 else rec.run
    limit = max(1, int(limit))
    return TraceJob(job_id=rec.job_id, account=str(rec.user), submit=float(rec.submit), gpus=n,
                    gpus_per_node=per_node, nodes=nodes, time_limit_s=limit, run_s=float(min(rec.run, limit)),
                    recorded_wait_s=float(rec.wait) if rec.wait >= 0 else None,
                    project=project_of(rec) if projects else "")


def load_jobs(path: str | Path, gpus_per_node: int, nodes: int,
              limit: int | None = None, *, limit_records: bool = False,
              projects: bool = False) -> tuple[list[TraceJob], dict[str, int]]:
    """The trace's replayable jobs, sorted by (submit, id), at most ``limit`` of them; with
    ``projects``, each in its group's project (:func:`map_job`).

    Records are sorted first; invalid ones (run < 0, processors <= 0) and
    ones too large for ``nodes`` nodes are skipped and counted. The limit
    counts replayed jobs, or with ``limit_records`` the sorted records
    (skipped ones included).

    Returns:
        ``(jobs, skipped)``: skipped counts by reason among the records
        before the last one kept (all of them without a limit).
    """
    records = sorted(read_swf(path), key=lambda r: (r.submit, r.job_id))
    jobs: list[TraceJob] = []
    skipped: dict[str, int] = {}
    if limit is not None and limit_records:
        records = records[:limit]
    for rec in records:
        if limit is not None and len(jobs) >= limit:
            break
        reason = skip_reason(rec)
        job = None
        if reason is None:
            job = map_job(rec, gpus_per_node, projects=projects)
            if job.nodes > nodes:
                reason = "larger than the pool"
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        jobs.append(job)
    return jobs, skipped
