"""Step 1, prepare: a fresh job dir and an empty log for the attempt, and (agent as root) the
job dir handed to the job's user once inputs are staged."""

from __future__ import annotations

import os
from pathlib import Path

from ..config import Workdir
from ..models import JobRef
from ..paths import remove_tree


def prepare_dir(workdir: Workdir, ref: JobRef) -> Path:
    """Make ``jobs/<job_id>/`` (mode 0700) anew, removing what an earlier attempt left, and
    start the attempt's log empty. Returns the job dir."""
    job_dir = workdir.job_dir(ref.job_id)
    if job_dir.exists() or job_dir.is_symlink():  # left by an earlier attempt
        remove_tree(job_dir)
    job_dir.mkdir(mode=0o700, parents=True)
    job_dir.chmod(0o700)
    log_path = workdir.log_path(ref.job_id, ref.attempt)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    return job_dir


def hand_over(job_dir: Path, job_user: tuple[int, int] | None) -> None:
    """Give the job dir and what was staged into it to ``job_user`` ``(uid, gid)`` (agent running
    as root); nothing without one. Hard links into the node's input cache stay the agent's."""
    if job_user is None:
        return
    uid, gid = job_user
    os.chown(job_dir, uid, gid)
    for root, dirs, files in os.walk(job_dir):
        for name in dirs + files:
            path = os.path.join(root, name)
            if name in files and os.lstat(path).st_nlink > 1:
                continue  # a hard link into the node's input cache: the job may read it, never change it
            os.lchown(path, uid, gid)
