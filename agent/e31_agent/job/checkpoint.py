"""Step 2a, restore: put the checkpoint an attempt starts with back in the job dir (issue 24 item 5).

The assignment lists the files of the newest kept version (``checkpoint.files``: path, size,
sha256); each is streamed from the site (``GET jobs/<id>/checkpoint/``) into place and checked
against its sha256. The directory is packed with the outputs at the attempt's end
(:attr:`~e31_agent.models.Assignment.packed_paths`), so the next attempt gets what this one saved.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from ..client import Aborted, ApiClient, ApiError
from ..models import Assignment
from .base import Control, Dropped

log = logging.getLogger(__name__)

CHUNK = 1 << 20


class RestoreError(Exception):
    """A checkpoint file could not be put back; ``str()`` is the reason shown to the user."""


def _target(job_dir: Path, path: str) -> Path:
    """Where ``path`` (a manifest path, relative) goes under ``job_dir``; refuses one that leaves it."""
    target = (job_dir / path).resolve()
    if not target.is_relative_to(job_dir.resolve()) or target == job_dir.resolve():
        raise RestoreError(f"checkpoint file {path!r} is outside the job dir")
    return target


def restore_checkpoint(a: Assignment, client: ApiClient, job_dir: Path, control: Control) -> str | None:
    """Fetch every file of ``a.checkpoint_files`` into ``job_dir``; returns why the attempt must not
    start ("checkpoint restore failed: ..."), or None (also when there is nothing to restore).

    Raises:
        Dropped: the attempt was dropped meanwhile.
    """
    done = 0
    for entry in a.checkpoint_files:
        path = str(entry["path"])
        try:
            target = _target(job_dir, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            tmp = target.with_name(f".{target.name}.e31-restore")
            with client.open_checkpoint_file(a.job_id, a.attempt, path, abort=control.abort) as response, \
                    open(tmp, "wb") as out:
                for chunk in response.iter_bytes(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != entry["sha256"]:
                tmp.unlink(missing_ok=True)
                raise RestoreError(f"checkpoint file {path}: sha256 does not match the kept version")
            os.replace(tmp, target)
            done += int(entry.get("size_bytes") or 0)
        except Aborted:
            raise Dropped() from None
        except (RestoreError, ApiError, OSError) as exc:
            log.warning("%s: checkpoint restore failed: %s", a.ref, exc)
            return f"checkpoint restore failed: {exc}"
    if a.checkpoint_files:
        log.info("%s: restored %d checkpoint files (%d bytes)", a.ref, len(a.checkpoint_files), done)
    return None
