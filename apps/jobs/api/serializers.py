"""What the jobs API returns."""
from __future__ import annotations

from django.urls import reverse
from e31_protocol.redact import redact_value
from rest_framework import serializers

from apps.artifacts.services import bundles_latest
from apps.core import clock
from apps.metering.selectors import Money, job_money

from ..arrays import array_counts
from ..checkpoints import checkpoint_versions
from ..models import Job, JobArray, JobEvent
from ..prestage import staging_progress
from ..selectors import project_name
from ..services.outputs import output_warnings, outputs_unmatched


class ShownSpecField(serializers.JSONField):
    """A stored spec as shown: a URL's userinfo and signature parts as ``***`` (issue 23)."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value):
        return redact_value(value)


class JobSerializer(serializers.ModelSerializer):
    """One job as SPEC §7 lists it; money totals over all of its leases."""

    spec = ShownSpecField(help_text="The spec as validated; names of secrets only, URL credentials as ***.")
    billed_seconds = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    bundle = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    attempts = serializers.IntegerField(source="attempt")
    staging = serializers.SerializerMethodField()
    array_id = serializers.IntegerField(read_only=True, allow_null=True,
                                        help_text="The job array this job is a task of, or null.")
    array_index = serializers.IntegerField(read_only=True, allow_null=True,
                                           help_text="Its index in the array (E31_ARRAY_INDEX), or null.")

    outputs_unmatched = serializers.SerializerMethodField()
    warnings = serializers.SerializerMethodField()
    checkpoints = serializers.SerializerMethodField()
    project = serializers.SerializerMethodField()
    owner = serializers.CharField(source="owner.username", read_only=True,
                                  help_text="Who submitted it (a project's members see each other's jobs).")

    class Meta:
        model = Job
        fields = [
            "id", "url", "name", "spec", "state", "outcome", "end_reason", "status_message",
            "queue_position", "estimated_start_at", "latest_start_at", "pending_reason",
            "submitted_at", "rented_at", "run_started_at", "run_ended_at", "released_at",
            "exit_code", "attempts", "max_attempts", "billed_seconds", "cost", "bundle",
            "log_size", "cancel_requested_at", "staging", "array_id", "array_index",
            "outputs_unmatched", "warnings", "checkpoints", "project", "owner",
        ]

    def get_project(self, job: Job) -> str:
        """The project's name (SPEC §9); ``~username`` for the owner's personal project."""
        return project_name(job)

    def get_outputs_unmatched(self, job: Job) -> list[str]:
        """Declared output paths/globs that matched no file when the latest attempt packed
        ([] when all matched, or when an older agent did not say)."""
        return outputs_unmatched(job)

    def get_warnings(self, job: Job) -> list[str]:
        """Things the owner should know, in words: "output `results/*.csv` matched no file"."""
        return output_warnings(job)

    def get_checkpoints(self, job: Job) -> list[dict] | None:
        """The kept versions of ``checkpoint.path``, newest attempt first: ``{"attempt", "rank",
        "completed_at", "size_bytes", "files"}`` (a file count; the files are in that attempt's
        bundle); ``[]`` when none is kept, null in a list of jobs (read the job)."""
        if self.context.get("listed", False):
            return None
        return [{"attempt": v.attempt, "rank": v.rank, "completed_at": v.completed_at, "size_bytes": v.size_bytes,
                 "files": len(v.files)} for v in checkpoint_versions(job)]

    def _leases(self, job: Job) -> list:
        if job.rented_at is None and job.attempt == 1:
            return []  # never rented: no lease to read
        cache = self.context.setdefault("_leases", {})
        if job.pk not in cache:
            cache[job.pk] = list(job.leases.all())
        return cache[job.pk]

    def _money(self, job: Job) -> Money:
        """Charged leases plus what an open run has accrued so far (SPEC §4)."""
        return job_money(self._leases(job), clock.now())

    def get_billed_seconds(self, job: Job) -> int:
        return self._money(job).billed_seconds

    def get_cost(self, job: Job) -> str:
        return f"{self._money(job).cost:.6f}"

    def get_bundle(self, job: Job) -> dict | None:
        """Rank 0's bundle (the only one on one node); ``ranks`` lists every node's for multi-node jobs.

        ``files_count`` is the number of files in its manifest; ``files`` (the manifest itself) only
        for one job, never in the list (the ``listed`` context), whose ``files_url`` gives them."""
        if job.run_started_at is None and job.attempt == 1:
            return None  # never ran: nothing was packed
        bundles = bundles_latest(job)
        if not bundles:
            return None
        request = self.context.get("request")

        def absolute(url: str) -> str:
            return request.build_absolute_uri(url) if request else url

        listed = self.context.get("listed", False)

        def describe(bundle) -> dict:
            url = reverse("api:job-bundle", args=[job.pk]) + (f"?rank={bundle.rank}" if bundle.rank else "")
            files_url = reverse("api:job-files", args=[job.pk]) + (f"?rank={bundle.rank}" if bundle.rank else "")
            described = {"rank": bundle.rank, "size_bytes": bundle.size_bytes, "sha256": bundle.sha256,
                         "attempt": bundle.attempt, "expires_at": bundle.expires_at,
                         "expired_at": bundle.expired_at,  # set once the storage sweep deleted it: url answers 410
                         "url": absolute(url), "files_url": absolute(files_url)}
            if listed:  # a list never inlines a manifest: its files are at files_url
                described["files_count"] = getattr(bundle, "files_count", None)  # bundles_for_lists()
            else:
                described["files"] = bundle.files
                described["files_count"] = len(bundle.files)
            return described

        first = describe(bundles[0])
        if job.nodes > 1:
            first["ranks"] = [describe(b) for b in bundles]
        return first

    def get_staging(self, job: Job) -> dict | None:
        """Inputs on their way: ``{"phase": "staging"|"prestage", "bytes_done", "bytes_total",
        "rate_bytes_per_s", "percent", "nodes", "state", "message"}`` (bytes, bytes/s), else null."""
        progress = staging_progress(job) if job.state in ("queued", "rented") else None
        return progress.to_json() if progress else None

    def get_url(self, job: Job) -> str:
        request = self.context.get("request")
        url = reverse("api:job-detail", args=[job.pk])
        return request.build_absolute_uri(url) if request else url


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["seq", "at", "from_state", "to_state", "detail"]


class ArraySerializer(serializers.ModelSerializer):
    """One job array (SPEC §7): its size, its tasks' counts by state, where its tasks are listed.

    ``counts`` comes from the ``counts`` context (``{array_id: ArrayCounts}``, one aggregate
    query for a page of arrays), else one query for this array.
    """

    url = serializers.SerializerMethodField()
    jobs_url = serializers.SerializerMethodField()
    counts = serializers.SerializerMethodField()
    spec = ShownSpecField()

    class Meta:
        model = JobArray
        fields = ["id", "url", "name", "size", "spec", "submitted_at", "cancel_requested_at", "counts", "jobs_url"]

    def _absolute(self, url: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request else url

    def get_url(self, array: JobArray) -> str:
        return self._absolute(reverse("api:array-detail", args=[array.pk]))

    def get_jobs_url(self, array: JobArray) -> str:
        return self._absolute(reverse("api:job-list") + f"?array={array.pk}")

    def get_counts(self, array: JobArray) -> dict:
        """``{"queued", "rented", "running", "output", "released": n, "outcomes": {outcome: n}}``."""
        counts = self.context.get("counts") or {}
        if array.pk not in counts:
            counts = array_counts([array.pk])
        return counts[array.pk].to_json()


class RerunSerializer(serializers.Serializer):
    """The body of ``POST /api/v1/jobs/{id}/rerun/`` (optional)."""

    resume = serializers.BooleanField(required=False, default=False,
                                      help_text="Start from this job's newest kept checkpoint.")
