"""The two ends of a bundle's upload, for both storages (local chunks, :mod:`.services`; direct to
an object store, :mod:`.direct`): a verified archive is kept (:func:`bundle_keep`), a refused or
stale one starts over (:func:`bundle_start_over`). The caller holds the bundle's row lock and has
put the archive's bytes where they go; these write the row."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .models import Bundle
from .verify import Verified

BUNDLE_NAMES = {"tar": "bundle.tar", "tar.gz": "bundle.tar.gz"}  # stored name by archive format


def bundle_kept_name(bundle: Bundle, archive_format: str) -> str:
    """Storage name of the attempt's kept bundle of that rank: ``bundles/<job>/<attempt>/<rank>/bundle.tar``
    (``bundle.tar.gz`` from an older agent)."""
    return f"bundles/{bundle.job_id}/{bundle.attempt}/{bundle.rank}/{BUNDLE_NAMES[archive_format]}"


def kept_entry(entry: dict[str, Any], offset: int | None) -> dict[str, Any]:
    """A manifest entry as kept: path, size_bytes, sha256, and ``offset`` (bytes into the archive
    where the file's data starts) when the archive is a plain tar."""
    kept = {"path": entry["path"], "size_bytes": entry["size_bytes"], "sha256": str(entry["sha256"]).lower()}
    if offset is not None:
        kept["offset"] = offset
    return kept


def bundle_keep(*, bundle: Bundle, name: str, size_bytes: int, sha256: str, files: list[dict[str, Any]],
                found: Verified, retention_days: int, now: datetime) -> Bundle:
    """Keep the verified archive stored as ``name``: the bundle is complete at ``now`` and expires
    ``retention_days`` days later; its manifest ``files`` is kept with each file's data offset
    (:func:`kept_entry`). The chunks' records and the staging state are dropped. Saves the row."""
    bundle.parts.all().delete()
    bundle.file.name = name
    bundle.size_bytes, bundle.sha256 = size_bytes, sha256.lower()
    bundle.files = [kept_entry(f, found.offsets.get(f["path"])) for f in files]
    bundle.completed_at = now
    bundle.expires_at = now + timedelta(days=retention_days)
    bundle.staging_name = ""
    bundle.verifying_since = None
    bundle.save()
    return bundle


def bundle_start_over(*, bundle: Bundle, why: str = "") -> Bundle:
    """Drop what was received of the bundle: the agent may upload it again from byte 0
    (docs/agent-protocol.md). ``why`` (at most 500 characters kept) is what ``GET bundle/`` says
    in ``refused``. Saves the row; the caller deletes the received bytes from the storage."""
    bundle.parts.all().delete()
    bundle.received_bytes = 0
    bundle.size_bytes = None
    bundle.sha256 = ""
    bundle.files = []
    bundle.direct_upload_id = ""
    bundle.direct_started_at = None
    bundle.staging_name = ""
    bundle.verifying_since = None
    bundle.refused = why[:500]
    bundle.save()
    return bundle
