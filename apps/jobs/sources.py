"""The user's own words for a job's input sources in messages shown to them (issue 16).

An agent names an upload by its internal reference (``upload:<uuid>``); the user knows it as the
file they uploaded and the target they gave it. :func:`source_words` rewrites the references of
the job's own inputs; a reference that is not one of the job's inputs is left as it is (it
names nothing of anyone else's).
"""
from __future__ import annotations

import re
import uuid

from apps.artifacts.models import Upload, uploads_usable

from .models import Job

UPLOAD_REF = re.compile(r"upload:([0-9a-fA-F-]{32,36})")


def is_uuid(text: str) -> bool:
    """Whether ``text`` parses as a UUID (an upload's primary key, in any of its spellings)."""
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def source_words(job: Job, text: str) -> str:
    """``text`` with each ``upload:<uuid>`` of ``job``'s inputs replaced by
    ``"<file name>" (to <target>)``.

    Args:
        job: the job whose spec lists the inputs (``spec["data"]``: source, target).
        text: a message from the agent (staging failure, ...).
    Returns:
        The rewritten text; ``text`` unchanged when it names no input of the job.
    """
    refs = set(UPLOAD_REF.findall(text))
    if not refs:
        return text
    targets: dict[str, str] = {}
    for item in (job.spec or {}).get("data") or []:
        match = UPLOAD_REF.fullmatch(str(item.get("source", "")))
        if match:
            targets[match.group(1).lower()] = str(item.get("target") or "./")
    ids = []
    for ref in refs:
        try:
            ids.append(uuid.UUID(ref))
        except ValueError:
            continue
    names = {str(u.id): u.name for u in Upload.objects.filter(uploads_usable(job.owner_id, job.project_id), pk__in=ids)}

    def words(match: re.Match[str]) -> str:
        key = match.group(1).lower()
        if key not in targets or key not in names:
            return match.group(0)
        return f'"{names[key]}" (to {targets[key]})'

    return UPLOAD_REF.sub(words, text)
