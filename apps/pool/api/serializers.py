"""What agents send: inventory, heartbeats, reports (docs/agent-protocol.md)."""
from __future__ import annotations

from rest_framework import serializers

from apps.jobs.services import REPORT_TYPES
from apps.pool.api.bounds import BIGINT_MAX, INT_MAX


class GpuInSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=1023)
    uuid = serializers.CharField(max_length=100)
    model = serializers.CharField(max_length=64)
    memory_mb = serializers.IntegerField(min_value=1, max_value=10_000_000)


class RegisterSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=255)
    agent_version = serializers.CharField(max_length=32, required=False, default="")
    gpus = GpuInSerializer(many=True, max_length=1024)
    cpus = serializers.IntegerField(min_value=0, max_value=1_000_000)
    memory_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)
    disk_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, required=False, default=0)
    runtimes = serializers.ListField(child=serializers.CharField(max_length=32), max_length=10, required=False,
                                     default=list)
    simulated = serializers.BooleanField(required=False, default=False)

    def validate_gpus(self, value: list[dict]) -> list[dict]:
        indexes = [g["index"] for g in value]
        if len(set(indexes)) != len(indexes):
            raise serializers.ValidationError("GPU indexes must be unique")
        return value


class AttemptRefSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(max_value=BIGINT_MAX, min_value=1)
    attempt = serializers.IntegerField(max_value=INT_MAX, min_value=1)


class GpuHealthSerializer(serializers.Serializer):
    """One GPU's health as the agent read it from NVML (None: could not be read)."""

    uuid = serializers.CharField(max_length=100)
    index = serializers.IntegerField(min_value=0, max_value=1023)
    temperature_c = serializers.IntegerField(min_value=-100, max_value=300, required=False, allow_null=True)
    utilization_pct = serializers.IntegerField(min_value=0, max_value=100, required=False, allow_null=True)
    memory_used_mb = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, required=False, allow_null=True)
    ecc_uncorrected = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, required=False, allow_null=True)
    ecc_corrected = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, required=False, allow_null=True)


class HealthSerializer(serializers.Serializer):
    source = serializers.ChoiceField(choices=["nvml", "simulated", "none"], required=False, default="none")
    gpus = GpuHealthSerializer(many=True, max_length=1024, required=False, default=list)


class HeartbeatSerializer(serializers.Serializer):
    running = AttemptRefSerializer(many=True, required=False, default=list)
    health = HealthSerializer(required=False)


class ReportSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(max_value=INT_MAX, min_value=1)
    seq = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    type = serializers.ChoiceField(choices=REPORT_TYPES)
    exit_code = serializers.IntegerField(required=False, allow_null=True, min_value=-255, max_value=255)
    reason = serializers.ChoiceField(
        choices=["exit", "time_limit", "cancelled", "staging_failed", "start_failed"], required=False)
    message = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    bytes_done = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0)
    bytes_total = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0, allow_null=True)
    bytes_fetched = serializers.IntegerField(max_value=BIGINT_MAX, required=False,
                                             min_value=0)  # downloaded on the meter
    bytes_cached = serializers.IntegerField(max_value=BIGINT_MAX, required=False,
                                            min_value=0)  # linked in from the node's cache
    pid = serializers.IntegerField(max_value=INT_MAX, required=False)


class ManifestFileSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1000)
    size_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")


class BundleCompleteSerializer(serializers.Serializer):
    size_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")
    files = ManifestFileSerializer(many=True, max_length=100_000)
