"""What the jobs API returns."""
from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from apps.artifacts.services import bundle_latest

from ..models import Job, JobEvent


class JobSerializer(serializers.ModelSerializer):
    """One job as SPEC §7 lists it; money totals over all of its leases."""

    billed_seconds = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    bundle = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    attempts = serializers.IntegerField(source="attempt")

    class Meta:
        model = Job
        fields = [
            "id", "url", "name", "spec", "state", "outcome", "end_reason", "status_message",
            "queue_position", "estimated_start_at", "pending_reason",
            "submitted_at", "rented_at", "run_started_at", "run_ended_at", "released_at",
            "exit_code", "attempts", "max_attempts", "billed_seconds", "cost", "bundle",
            "log_size", "cancel_requested_at",
        ]

    def _leases(self, job: Job) -> list:
        if job.rented_at is None and job.attempt == 1:
            return []  # never rented: no lease to read
        cache = self.context.setdefault("_leases", {})
        if job.pk not in cache:
            cache[job.pk] = list(job.leases.all())
        return cache[job.pk]

    def get_billed_seconds(self, job: Job) -> int:
        return sum(lease.billed_seconds or 0 for lease in self._leases(job) if lease.charged)

    def get_cost(self, job: Job) -> str:
        from decimal import Decimal

        total = sum((lease.cost or Decimal(0) for lease in self._leases(job) if lease.charged), Decimal(0))
        return f"{total:.6f}"

    def get_bundle(self, job: Job) -> dict | None:
        if job.run_started_at is None and job.attempt == 1:
            return None  # never ran: nothing was packed
        bundle = bundle_latest(job)
        if bundle is None:
            return None
        request = self.context.get("request")
        url = reverse("api:job-bundle", args=[job.pk])
        return {"size_bytes": bundle.size_bytes, "sha256": bundle.sha256, "files": bundle.files,
                "attempt": bundle.attempt, "expires_at": bundle.expires_at,
                "url": request.build_absolute_uri(url) if request else url}

    def get_url(self, job: Job) -> str:
        request = self.context.get("request")
        url = reverse("api:job-detail", args=[job.pk])
        return request.build_absolute_uri(url) if request else url


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["seq", "at", "from_state", "to_state", "detail"]
