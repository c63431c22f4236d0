"""Submitting jobs: validate a spec fully, store the job queued, ask for a scheduling cycle (SPEC §2-§3)."""
from __future__ import annotations

import os.path
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from apps.artifacts.models import Upload, uploads_usable
from apps.core import clock
from apps.core.choices import JobState
from apps.core.observe import observe
from apps.jobs import signals
from apps.jobs.dependencies import after_errors, dependencies_store
from apps.jobs.models import Job, JobEvent
from apps.jobs.retention import uploads_lock
from apps.jobs.secret_refs import secret_ref_errors
from apps.jobs.services.retries import retry_attempts
from apps.jobs.spec import JobSpec, SpecError, compute_request, parse_spec, requirement_columns, spec_document
from apps.jobs.spend import spend_limit_enforce
from apps.pool import signals as pool_signals
from apps.pool.selectors import scheme_readers
from apps.projects.access import shared_q
from apps.projects.services import ProjectError, submit_project
from apps.scheduling.adapter import gang_refusal, pool_refusal
from apps.scheduling.core import job_request
from apps.scheduling.tasks import enqueue_schedule_cycle

CLOUD_PACKAGES = {"s3": "s3fs", "gs": "gcsfs"}  # what an agent needs to read each scheme (its cloud extra)


def spec_validate(document: Any, *, owner: AbstractBaseUser,
                  attachments: Mapping[str, Upload] | None = None) -> JobSpec:
    """Validate a spec document fully: fields, uploads, file roots and the pool.

    ``upload:<name>`` naming one of ``attachments`` (files sent with the same
    submission) is rewritten to ``upload:<id>``; ``upload:<id>`` must be one of the owner's own
    uploads or of the job's project's (:func:`apps.artifacts.models.uploads_usable`). ``project``
    (default: the owner's personal project, or a service token's own) must be one where the owner
    may submit (:func:`apps.projects.services.submit_project`).

    Raises:
        SpecError: field errors, keyed by field path.
    """
    spec = parse_spec(document, time_limit_max_s=settings.E31_TIME_LIMIT_MAX_S,
                      retention_days_max=settings.E31_RETENTION_DAYS_MAX)
    errors: dict[str, list[str]] = {}
    attachments = attachments or {}
    try:
        spec._project = submit_project(owner, spec.project)
        spec._project_id = spec._project.pk
    except ProjectError as e:
        errors["project"] = [e.message]
    for i, item in enumerate(spec.data):
        if item.source.startswith("upload:"):
            ref = item.source[len("upload:"):]
            if ref in attachments:
                item.source = attachments[ref].source
            elif not Upload.objects.filter(uploads_usable(owner.pk, spec._project_id), pk=_as_uuid(ref)).exists():
                errors[f"data[{i}].source"] = [f"No uploaded file named {ref!r}: attach it or upload it first."]
        elif item.source.startswith("file://") and not _file_allowed(item.source):
            errors[f"data[{i}].source"] = ["file:// is only allowed in directories the operator allows."]
    for i, item in enumerate(spec.data):
        scheme = item.source.split("://", 1)[0] if item.source.startswith(("s3://", "gs://")) else None
        if scheme and scheme_readers(scheme) == 0:
            errors[f"data[{i}].source"] = [
                f"No node of this site can read {scheme}:// sources (their agents lack {CLOUD_PACKAGES[scheme]}); "
                "use https:// or an upload, or ask the operator."]
    errors.update(secret_ref_errors(spec, owner_id=owner.pk, project_id=spec._project_id))
    resume = spec.checkpoint.resume_from if spec.checkpoint else None
    if resume is not None and not Job.objects.filter(shared_q(owner), pk=resume).exists():
        errors["checkpoint.resume_from"] = [f"You have no job {resume} to resume from."]
    errors.update(after_errors(spec, owner=owner))
    if not errors:
        job = unsaved_job(spec, owner)
        request = job_request(job, job_id=0, account=job.owner_id, submitted_at_s=0.0)  # not saved: no id
        refusal = pool_refusal(request)
        if refusal:
            errors["compute"] = [refusal[0].upper() + refusal[1:] + "."]
        elif refusal := gang_refusal(request):
            errors["compute.nodes"] = [refusal[0].upper() + refusal[1:] + "."]
    if errors:
        raise SpecError(errors)
    return spec


def _as_uuid(ref: str) -> str | None:
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        return None


def _file_allowed(url: str) -> bool:
    path = os.path.realpath(url[len("file://"):])
    return any(path == os.path.realpath(root) or path.startswith(os.path.realpath(root) + os.sep)
               for root in settings.E31_FILE_ROOTS)


def unsaved_job(spec: JobSpec, owner: AbstractBaseUser, *, now: datetime | None = None) -> Job:
    """A :class:`Job` built from a validated ``spec`` with its scheduling columns, submitted at ``now``
    (default :func:`apps.core.clock.now`), not saved (a submit saves it; :func:`spec_validate` and an
    array's submit use it as it is)."""
    document = spec_document(spec)
    return Job(owner=owner, project_id=spec._project_id, name=spec.name, spec=document, kind=spec.work.kind,
               gpus_per_node=spec.compute.gpus, nodes=spec.compute.nodes,
               time_limit_s=spec.compute.time_limit_s, submitted_at=now or clock.now(),
               max_attempts=retry_attempts(document), **requirement_columns(document))


def job_submit(*, owner: AbstractBaseUser, document: Any,
               attachments: Mapping[str, Upload] | None = None, now: datetime | None = None) -> Job:
    """Accept a job: validate, store it queued, ask for a scheduling cycle on commit.

    One short transaction and, after it, small messages (:func:`after_submit`); the
    cycle runs elsewhere, and the job goes to rented in it if matching GPUs are free. ``now`` is
    its submit time (default :func:`apps.core.clock.now`).

    Raises:
        SpecError: the spec is invalid, no known node could ever hold it, or its
            worst case exceeds what is left of the owner's monthly spend limit.
    """
    started = time.perf_counter()
    spec = spec_validate(document, owner=owner, attachments=attachments)
    if spec.output.retention_days is None:
        spec.output.retention_days = settings.E31_RETENTION_DAYS_DEFAULT
    now = now or clock.now()
    with transaction.atomic():
        spec_uploads_lock(owner, spec)  # locks them: the storage sweep cannot delete one meanwhile
        # SpecError if over:
        spend_limit_enforce(owner=owner, request=compute_request(spec.compute.model_dump(mode="json")), now=now,
                            project_id=spec._project_id)
        job = unsaved_job(spec, owner, now=now)
        job.event_seq = 1  # the "submitted" event below; a new job has no other writer yet
        job.save()
        JobEvent.objects.create(job=job, seq=1, at=job.submitted_at, to_state=JobState.QUEUED, detail="submitted")
        dependencies_store(job.spec.get("after") or [], job_id=job.pk)
        after_submit(owner.pk, [job.pk])
    observe("submit", time.perf_counter() - started)  # /metrics' submit latency: accepted submits only
    return job



def spec_uploads_lock(owner: AbstractBaseUser, spec: JobSpec) -> None:
    """Lock the uploads the spec names (:func:`apps.jobs.retention.uploads_lock`, issue 15); call
    inside the submit's transaction, so the storage sweep cannot delete one under it.

    Raises:
        SpecError: one was deleted since the spec was checked (the storage sweep).
    """
    gone = set(uploads_lock(owner.pk, [item.source for item in spec.data], project_id=spec._project_id))
    errors = {f"data[{i}].source": ["This uploaded file was deleted (uploads no job uses are kept "
                                    f"{settings.E31_UPLOAD_GRACE_DAYS} days): upload it again."]
              for i, item in enumerate(spec.data) if item.source in gone}
    if errors:
        raise SpecError(errors)


def after_submit(owner_id: int, job_ids: list[int]) -> None:
    """The post-commit part of a submit (one job or many): call inside the submit's transaction.

    After commit: one small message to the owner's live pages (new rows), one to the pool
    page (more jobs waiting), and one ask for a scheduling cycle. Nothing is rendered and
    no cycle runs here (issue 10): the cycle runs in a Celery worker, or in the local
    loop of ``make run`` (:mod:`apps.scheduling.cycle_loop`). The live pages hear it through
    :mod:`apps.jobs.signals` (their receivers defer the sends to the commit).
    """
    signals.jobs_changed.send(sender=Job, owner_id=owner_id, job_ids=list(job_ids))
    pool_signals.pool_changed.send(sender=Job)
    enqueue_schedule_cycle()
