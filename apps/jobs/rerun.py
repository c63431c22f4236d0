"""Run a job again (issue 16 item 4): a new job from the same spec and the same uploaded files.

``POST /api/v1/jobs/{id}/rerun/`` calls :func:`job_rerun`. The new job is an ordinary submit
(validation against today's pool and limits, spend limit, queue), owned by the caller, with
"re-run of job N" in its timeline. A task of a job array is re-run as one job (its spec
without ``array``).
"""
from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction

from apps.artifacts.models import Upload, uploads_usable
from apps.projects.access import Action, may, refusal, role_of

from .models import Job
from .services.submit import job_submit
from .spec import SpecError
from .state import event_add


def rerun_document(job: Job) -> dict[str, Any]:
    """The spec document a re-run of ``job`` submits: the stored (validated) spec, without ``array``.

    Its ``upload:`` sources are already ``upload:<id>`` (the submit rewrote attached file
    names to the ids of the stored uploads), so the same files are staged again.
    """
    return {key: value for key, value in job.spec.items() if key != "array"}


def uploads_missing(document: dict[str, Any], *, owner: AbstractBaseUser,
                    project_id: int | None = None) -> dict[str, list[str]]:
    """``{"data[i].source": [message]}`` for each ``upload:<id>`` of ``document`` that ``owner`` (in
    project ``project_id``: its uploads too) may no longer use (the message names the file's target,
    never the internal id)."""
    refs: dict[int, uuid.UUID | None] = {}
    for i, item in enumerate(document.get("data") or []):
        source = item.get("source") or ""
        if source.startswith("upload:"):
            try:
                refs[i] = uuid.UUID(source[len("upload:"):])
            except ValueError:
                refs[i] = None
    kept = set(Upload.objects.filter(uploads_usable(owner.pk, project_id), pk__in=[r for r in refs.values() if r])
               .values_list("pk", flat=True))
    return {f"data[{i}].source": [f"The file uploaded for {document['data'][i].get('target') or 'this input'} is "
                                  "no longer kept; submit the spec again with the file attached."]
            for i, ref in refs.items() if ref not in kept}


def job_rerun(*, job: Job, by: AbstractBaseUser, resume: bool = False) -> Job:
    """Submit a new job with ``job``'s spec and uploads, owned by ``by`` (who owns ``job`` or may submit
    to its project: a teammate re-runs into the same project);
    with ``resume``, its first attempt starts with ``job``'s newest kept checkpoint
    (``checkpoint.resume_from``, SPEC §2).

    The new job is checked as any submit is (:func:`apps.jobs.services.job_submit`): the pool,
    the time limit maximum, the monthly spend limit. The original job is not changed.

    Raises:
        PermissionDenied: ``by`` neither owns ``job`` nor may submit to its project (a viewer; a
            stranger gets 404 from the API before this).
        SpecError: an uploaded input is no longer kept (``{"data[i].source": [...]}``), ``resume``
            of a job whose spec names no checkpoint (``{"resume": [...]}``), or the spec no longer
            passes a submit's checks (same errors as a submit).
    """
    if job.owner_id != by.pk and not may(by, job.project_id, Action.SUBMIT):
        raise PermissionDenied(refusal(job.project.name if job.project_id else "~" + job.owner.get_username(),
                                       role_of(by, job.project_id), Action.SUBMIT))
    document = rerun_document(job)
    if job.project_id and not job.project.is_personal:
        document["project"] = job.project.name  # a teammate's re-run stays in the project
    if resume:
        if not document.get("checkpoint"):
            raise SpecError({"resume": [f"Job {job.pk} names no checkpoint.path: there is nothing to resume from."]})
        document["checkpoint"] = {**document["checkpoint"], "resume_from": job.pk}
    missing = uploads_missing(document, owner=by, project_id=job.project_id)
    if missing:
        raise SpecError(missing)
    with transaction.atomic():
        new = job_submit(owner=by, document=document)
        event_add(new, detail=f"re-run of job {job.pk}" + (", resuming from its checkpoint" if resume else ""))
    return new
