"""Step 5, pack: the declared outputs into the attempt's bundle, once (a resumed run takes the
archive it packed before, recorded in ``bundle.json``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from e31_protocol import FinishCode

from .. import node_inputs
from ..models import FileEntry, JobRef
from ..packer import Bundle, pack
from ..state import read_json, write_json
from .base import OutputProblem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackJob:
    """What the packer is handed: the declared outputs (``spec.output_paths``, globs relative to
    ``job_dir``, and the checkpoint directory's glob when the spec names one), the site's cap on
    their bytes (None: no cap), where the archive goes (``bundle_path``) and its record for a
    resumed run (``meta_path``, ``bundle.json``), and the node's input cache dir (whose node
    limits bound the outputs too)."""

    ref: JobRef
    job_dir: Path
    output_paths: list[str]
    max_bytes: int | None
    bundle_path: Path
    meta_path: Path
    cache_dir: Path
    declared_paths: list[str] | None = None  # the spec's own; None: output_paths (a checkpoint adds one)


def pack_outputs(job: PackJob) -> Bundle | OutputProblem:
    """The bundle of ``job``'s declared outputs (packed now, or the one packed before), or the
    :class:`OutputProblem` (``packing_failed``) when it could not be packed."""
    bundle = load_bundle(job.meta_path, job.bundle_path)
    if bundle is not None:  # a resumed upload sends the archive it began with
        return bundle
    try:
        bundle = pack(
            job.job_dir, job.output_paths, job.bundle_path, job_id=job.ref.job_id, max_bytes=job.max_bytes,
            limits=node_inputs.for_cache_dir(job.cache_dir).output_limits,
        )
    except OSError as exc:
        log.error("%s: packing failed: %s", job.ref, exc)
        return OutputProblem(FinishCode.PACKING_FAILED, f"packing outputs failed: {exc}")
    if job.declared_paths is not None:  # an empty checkpoint directory is not an unmatched output
        bundle = replace(bundle, unmatched=tuple(p for p in bundle.unmatched if p in job.declared_paths))
    write_json(job.meta_path, {
        "size_bytes": bundle.size_bytes, "sha256": bundle.sha256, "files": [f.to_json() for f in bundle.files],
        "not_packed": list(bundle.not_packed), "unmatched": list(bundle.unmatched),
    })  # fmt: skip
    return bundle


def load_bundle(meta_path: Path, bundle_path: Path) -> Bundle | None:
    """The bundle packed before (its ``bundle.json`` and archive), or None."""
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or not bundle_path.is_file() or bundle_path.stat().st_size != meta["size_bytes"]:
        return None
    files = [FileEntry(path=f["path"], size_bytes=int(f["size_bytes"]), sha256=f["sha256"]) for f in meta["files"]]
    return Bundle(path=bundle_path, size_bytes=int(meta["size_bytes"]), sha256=meta["sha256"], files=files,
                  not_packed=tuple(meta.get("not_packed", ())), unmatched=tuple(meta.get("unmatched", ())))


def not_packed_note(not_packed: tuple[str, ...]) -> str | None:
    """The ``finished`` message when declared files were left out (sent with the code
    ``outputs_not_packed``; the server then records the outcome ``failed`` with it, SPEC §3),
    or None when every declared file was packed."""
    if not not_packed:
        return None
    shown = ", ".join(not_packed[:5]) + (f" and {len(not_packed) - 5} more" if len(not_packed) > 5 else "")
    return f"outputs not packed: {len(not_packed)} declared file{'s' if len(not_packed) > 1 else ''}: {shown}"


def not_packed_problem(bundle: Bundle) -> OutputProblem | None:
    """:func:`not_packed_note` as an :class:`OutputProblem`, or None when nothing was left out."""
    note = not_packed_note(bundle.not_packed)
    return OutputProblem(FinishCode.OUTPUTS_NOT_PACKED, note) if note else None
