"""Files that travel: inputs uploaded by users and output bundles."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


def upload_path(instance: Upload, filename: str) -> str:
    return f"uploads/{instance.owner_id}/{instance.id}"


def bundle_path(instance: Bundle, filename: str) -> str:
    return f"bundles/{instance.job_id}/{instance.attempt}/{instance.rank}/bundle.tar"


class Upload(models.Model):
    """A file a user uploaded as job input, referenced as ``upload:<id>``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploads")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="uploads", help_text=(
                                    "Set on a project's upload (SPEC §9): usable by the project's jobs only."))
    name = models.CharField(max_length=255)
    file = models.FileField(upload_to=upload_path, max_length=300)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def source(self) -> str:
        return f"upload:{self.id}"


def uploads_usable(owner_id: int, project_id: int | None) -> Q:
    """The uploads a job of ``owner_id`` in project ``project_id`` may name: the owner's own (of no
    project) and the project's, whoever of its members uploaded them (SPEC §9)."""
    own = Q(owner_id=owner_id, project__isnull=True)
    return own | Q(project_id=project_id) if project_id is not None else own


def upload_jobs_q(upload: Upload, prefix: str = "") -> Q:
    """The jobs that may name ``upload`` (the other side of :func:`uploads_usable`): its owner's for
    an upload of no project, else its project's; ``prefix`` is the path to the job (``"job__"``)."""
    if upload.project_id is None:
        return Q(**{f"{prefix}owner_id": upload.owner_id})
    return Q(**{f"{prefix}project_id": upload.project_id})


class Bundle(models.Model):
    """The output of one node (``rank``) of one attempt of a job: ``bundle.tar`` plus its manifest.

    A job on one node has one bundle (rank 0); a multi-node job one per node,
    each with the outputs found on that node. Chunks arrive at
    ``received_bytes`` and are written into one partial file until ``complete``
    verifies it. ``files``: one ``{"path", "size_bytes", "sha256", "offset"}``
    per file, ``offset`` being where its bytes start in the archive (absent for
    a ``bundle.tar.gz`` from an older agent, whose stream has no offsets).
    ``expires_at``: when the storage sweep may delete the archive (completion plus the job's
    ``output.retention_days``); ``expired_at``: when it did (``file`` is then empty).
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="bundles")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField(default=0, help_text="Node rank that packed it (E31_NODE_RANK).")
    file = models.FileField(upload_to=bundle_path, max_length=300, blank=True)
    received_bytes = models.BigIntegerField(default=0)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True, default="")
    files = models.JSONField(default=list, blank=True, help_text="Manifest: path, size_bytes, sha256.")
    completed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True, help_text=(
        "When the storage sweep deleted the archive (issue 15); the row and its manifest stay."))
    # Direct upload to an S3-compatible store (issue 15; apps/artifacts/storage.py): the agent PUTs
    # the parts of multipart upload ``direct_upload_id`` of the object ``staging_name`` with URLs
    # the server signs; ``complete`` joins them and ``verifying_since`` is set until the side
    # worker has verified the object (then copied to ``file``) or refused it (``refused`` says why).
    staging_name = models.CharField(max_length=300, blank=True, default="")
    direct_upload_id = models.CharField(max_length=1024, blank=True, default="")
    direct_started_at = models.DateTimeField(null=True, blank=True)
    verifying_since = models.DateTimeField(null=True, blank=True)
    refused = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["job", "-attempt", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "rank"], name="bundle_job_attempt_rank_unique"),
        ]

    def __str__(self) -> str:
        return f"bundle of job {self.job_id} attempt {self.attempt} rank {self.rank}"

    @property
    def archive_name(self) -> str:
        """``bundle.tar``, or ``bundle.tar.gz`` for one an older agent packed (its stored name)."""
        return "bundle.tar.gz" if self.file.name.endswith(".tar.gz") else "bundle.tar"


class BundlePart(models.Model):
    """One verified chunk ``[offset, offset + size_bytes)`` of a bundle upload."""

    bundle = models.ForeignKey(Bundle, on_delete=models.CASCADE, related_name="parts")
    offset = models.BigIntegerField()
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(max_length=300)

    class Meta:
        ordering = ["bundle", "offset"]
        constraints = [models.UniqueConstraint(fields=["bundle", "offset"], name="bundle_part_offset_unique")]

    def __str__(self) -> str:
        return f"part of bundle {self.bundle_id} at {self.offset}"
