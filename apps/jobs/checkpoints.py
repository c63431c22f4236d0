"""Checkpoints that carry over (issue 24 item 5, SPEC §2): ``checkpoint.path`` names a directory of
the job dir that the platform keeps between attempts.

Every end of an attempt (exit, time limit, cancel, a drain's grace) packs that directory with the
declared outputs, in the attempt's bundle of each node rank: content-addressed by sha256 in the
bundle's manifest and kept under the bundles' retention. A later attempt of the job starts, on
each rank, with the files of the newest *completed* bundle of that rank that holds any: a bundle
whose upload a lost node cut off is never completed, so the version before it is used whole.
Reads only; the agent fetches the files through :func:`checkpoint_file`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apps.artifacts.models import Bundle
from apps.jobs.models import Job
from apps.projects.access import shared_q


def checkpoint_path(spec: dict[str, Any]) -> str | None:
    """The job's ``checkpoint.path`` (normalised, no trailing slash), or None."""
    return ((spec.get("checkpoint") or {}).get("path") or "").rstrip("/") or None


def _under(path: str, root: str) -> bool:
    return path.startswith(root + "/")


@dataclass(frozen=True)
class CheckpointVersion:
    """One kept version: the job, attempt and node rank that wrote it, when its bundle was
    completed, its files (``{"path", "size_bytes", "sha256"}``) and their total bytes."""

    job_id: int
    attempt: int
    rank: int
    completed_at: datetime
    files: list[dict[str, Any]]

    @property
    def size_bytes(self) -> int:
        return sum(int(f["size_bytes"]) for f in self.files)


def _version(bundle: Bundle, root: str) -> CheckpointVersion | None:
    files = [{"path": f["path"], "size_bytes": int(f["size_bytes"]), "sha256": f["sha256"]}
             for f in bundle.files or [] if _under(str(f.get("path", "")), root)]
    if not files:
        return None
    return CheckpointVersion(job_id=bundle.job_id, attempt=bundle.attempt, rank=bundle.rank,
                             completed_at=bundle.completed_at, files=files)


def checkpoint_versions(job: Job, *, root: str | None = None) -> list[CheckpointVersion]:
    """Every kept version of ``job``'s checkpoint, newest attempt first, by rank (empty when the
    spec names none): completed bundles not yet expired whose manifest holds files under the path
    (``root``: that path instead of ``job``'s own, for a job resumed from this one)."""
    root = root or checkpoint_path(job.spec)
    if root is None:
        return []
    bundles = Bundle.objects.filter(job=job, completed_at__isnull=False, expired_at__isnull=True) \
        .order_by("-attempt", "rank")
    return [v for v in (_version(b, root) for b in bundles) if v is not None]


def checkpoint_for(job: Job, *, attempt: int, rank: int) -> CheckpointVersion | None:
    """The version attempt ``attempt`` of ``job`` starts with on node rank ``rank``: the newest of an
    earlier attempt on that rank, else the newest of that rank of the job it resumes from
    (``checkpoint.resume_from``, a job its owner may see: theirs or their project's), or None."""
    own = next((v for v in checkpoint_versions(job) if v.rank == rank and v.attempt < attempt), None)
    if own is not None:
        return own
    source = (job.spec.get("checkpoint") or {}).get("resume_from")
    earlier = Job.objects.filter(shared_q(job.owner), pk=source).first() if source else None
    if earlier is None:
        return None
    return next((v for v in checkpoint_versions(earlier, root=checkpoint_path(job.spec)) if v.rank == rank), None)


def checkpoint_file(job: Job, *, attempt: int, rank: int, path: str) -> tuple[Bundle, str] | None:
    """The bundle holding file ``path`` of the version attempt ``attempt`` starts with on ``rank``
    and the path (for :func:`apps.artifacts.files.bundle_file`), or None when it is no such file."""
    version = checkpoint_for(job, attempt=attempt, rank=rank)
    if version is None or not any(f["path"] == path for f in version.files):
        return None
    bundle = Bundle.objects.get(job_id=version.job_id, attempt=version.attempt, rank=version.rank)
    return bundle, path
