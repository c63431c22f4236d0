"""What agents send and what they are answered: inventory, heartbeats, work, reports, logs,
bundles (docs/agent-protocol.md). The words and codes are :mod:`e31_protocol`'s; the answer
serializers (``...AnswerSerializer``) document the answers in the OpenAPI schema."""
from __future__ import annotations

from e31_protocol import (
    MESSAGE_MAX,
    REPORTS_PER_BATCH_MAX,
    SAMPLES_PER_POST_MAX,
    ErrorCode,
    ExitReason,
    FinishCode,
    HealthSource,
    NodeState,
    ReportType,
)
from rest_framework import serializers

from apps.agent_api.api.bounds import BIGINT_MAX, INT_MAX
from apps.scheduling.node_cache import REPORT_MAX


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
    sandboxed = serializers.BooleanField(required=False, default=False)
    data_schemes = serializers.ListField(child=serializers.CharField(max_length=16), max_length=16, required=False,
                                         help_text="The data[i].source schemes it can read (https, s3, gs, ...).")

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
    # issue 26 item 3: compute processes on the GPU, and the last XID error NVML reported (0 or absent: none)
    processes = serializers.IntegerField(max_value=INT_MAX, min_value=0, required=False, allow_null=True)
    xid = serializers.IntegerField(max_value=INT_MAX, min_value=0, required=False, allow_null=True)


class HealthSerializer(serializers.Serializer):
    source = serializers.ChoiceField(choices=[s.value for s in HealthSource], required=False,
                                     default=HealthSource.NONE.value)
    gpus = GpuHealthSerializer(many=True, max_length=1024, required=False, default=list)


class HeartbeatSerializer(serializers.Serializer):
    running = AttemptRefSerializer(many=True, required=False, default=list)
    health = HealthSerializer(required=False)
    # issue 14 item 5: input identities the node's cache holds, most recently used first (optional:
    # older agents send none, and their nodes just get no cache-affinity preference); v4: the
    # e31_protocol.inputs identities (in1-...), which a v3 agent's digests and sources never match
    cached_inputs = serializers.ListField(child=serializers.CharField(max_length=4096), max_length=REPORT_MAX,
                                          required=False)


EXIT_REASONS = [r.value for r in ExitReason]
ELAPSED_MAX_S = 10**8  # seconds; far past any time limit


def elapsed_field() -> serializers.FloatField:
    """``elapsed_s``: seconds on the agent's monotonic clock from its accept of the assignment to
    the moment reported (the run's end on ``exited``, its start on ``running``); SPEC §4."""
    return serializers.FloatField(required=False, min_value=0, max_value=ELAPSED_MAX_S)


def _finite(attrs: dict) -> dict:
    value = attrs.get("elapsed_s")
    if value is not None and value != value:  # NaN passes min/max checks
        raise serializers.ValidationError({"elapsed_s": ["Must be a number of seconds."]})
    return attrs


class ExitedSerializer(serializers.Serializer):
    """The ``exited`` a ``finished`` report stands for too (folded, protocol v2)."""

    exit_code = serializers.IntegerField(allow_null=True, min_value=-255, max_value=255)
    reason = serializers.ChoiceField(choices=EXIT_REASONS)
    message = serializers.CharField(required=False, allow_blank=True, max_length=MESSAGE_MAX)
    elapsed_s = elapsed_field()

    def validate(self, attrs: dict) -> dict:
        return _finite(attrs)


class ReportSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(max_value=INT_MAX, min_value=1)
    seq = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    type = serializers.ChoiceField(choices=[t.value for t in ReportType])
    exit_code = serializers.IntegerField(required=False, allow_null=True, min_value=-255, max_value=255)
    reason = serializers.ChoiceField(choices=EXIT_REASONS, required=False)
    message = serializers.CharField(required=False, allow_blank=True, max_length=MESSAGE_MAX)
    # on "finished" (protocol v3): what went wrong with the outputs; the server acts on it, never on message
    code = serializers.ChoiceField(choices=[c.value for c in FinishCode], required=False)
    bytes_done = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0)
    bytes_total = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0, allow_null=True)
    # downloaded on the meter; linked in from the node's cache
    bytes_fetched = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0)
    bytes_cached = serializers.IntegerField(max_value=BIGINT_MAX, required=False, min_value=0)
    pid = serializers.IntegerField(max_value=INT_MAX, required=False)
    exited = ExitedSerializer(required=False)  # only on "finished": the exited it folds in
    elapsed_s = elapsed_field()  # on "running" and "exited"

    def validate(self, attrs: dict) -> dict:
        _finite(attrs)
        if "exited" in attrs:
            if attrs["type"] != ReportType.FINISHED:
                raise serializers.ValidationError({"exited": ["Only a finished report may carry exited."]})
            attrs["exited"] = dict(attrs["exited"])
        if "code" in attrs and attrs["type"] != ReportType.FINISHED:
            raise serializers.ValidationError({"code": ["Only a finished report may carry a code."]})
        return attrs


class BatchReportSerializer(ReportSerializer):
    """One report of a batch: a report as above, with the job it is about."""

    job_id = serializers.IntegerField(min_value=1, max_value=2**63 - 1)




class ReportBatchSerializer(serializers.Serializer):
    """The envelope of ``POST reports/``; each item is validated on its own (one bad item is
    answered 400 alone)."""

    reports = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=REPORTS_PER_BATCH_MAX)


class ManifestFileSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1000)
    size_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")
    offset = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, required=False,
                                      help_text="Where the file's bytes start in the archive (the server finds "
                                                "and stores its own; this one is informative).")


class BundleCompleteSerializer(serializers.Serializer):
    size_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")
    files = ManifestFileSerializer(many=True, max_length=100_000)
    unmatched = serializers.ListField(
        child=serializers.CharField(max_length=1000, trim_whitespace=False), max_length=1000, required=False,
        help_text="Declared output paths/globs that matched no file (absent from an older agent).")


class ReportBatchRequestSerializer(serializers.Serializer):
    """``POST reports/`` as the schema shows it (the view validates each item on its own)."""

    reports = BatchReportSerializer(many=True, min_length=1, max_length=REPORTS_PER_BATCH_MAX)


# -- answers (OpenAPI only: the views build them as dicts) ----------------------------------


class ErrorAnswerSerializer(serializers.Serializer):
    """A refusal: ``detail`` for people, ``code`` for programs (protocol v3; match ``code``, never
    ``detail``)."""

    detail = serializers.CharField()
    code = serializers.ChoiceField(choices=[c.value for c in ErrorCode], required=False)


class BundleErrorAnswerSerializer(ErrorAnswerSerializer):
    received_bytes = serializers.IntegerField(help_text="Bytes of the bundle the server holds: go on from there.")


class RegisterAnswerSerializer(serializers.Serializer):
    node = serializers.CharField()
    heartbeat_interval_s = serializers.FloatField()
    poll_wait_s = serializers.FloatField()
    node_loss_timeout_s = serializers.FloatField()
    running = AttemptRefSerializer(many=True)
    protocol_version = serializers.IntegerField(help_text="The agent protocol version the server speaks.")


class HeartbeatAnswerSerializer(serializers.Serializer):
    cancel = AttemptRefSerializer(many=True)
    state = serializers.ChoiceField(choices=[s.value for s in NodeState])


class AssignedGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()


class InputScopeSerializer(serializers.Serializer):
    """v4: whose inputs a job's are, for the node's input cache (``e31_protocol.inputs``, issue 23)."""

    owner = serializers.CharField(help_text="The owner's opaque tenant id (a keyed hash, ow1-...).")
    project = serializers.CharField(allow_null=True, required=False, help_text="Issue 20; not sent yet.")
    credentials = serializers.ListField(child=serializers.CharField(allow_null=True), required=False,
                                        help_text="Per spec.data index: credentials id (cr1-...) or null.")


class GangNodeSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    host = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs of the gang on that node (the hostfile's slots).")


class GangNetSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="8 hex: the attempt's bridge on each host (e31b<name>).")
    vni = serializers.IntegerField(help_text="The VXLAN id joining the attempt's ranks across hosts.")
    prefix = serializers.IntegerField(help_text="Bits of the gang's network.")
    addresses = serializers.ListField(child=serializers.CharField(),
                                      help_text="Each node rank's address on gang0, rank 0 first (MASTER_ADDR).")


class CheckpointPlanSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="checkpoint.path, a directory of the job dir.")
    attempt = serializers.IntegerField(allow_null=True, help_text="Whose version the files are; null: none kept.")
    files = serializers.ListField(child=serializers.DictField(),
                                  help_text="{path, size_bytes, sha256}, fetched from jobs/<id>/checkpoint/.")


class AssignmentSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    attempt = serializers.IntegerField()
    lease_id = serializers.IntegerField()
    gpus = AssignedGpuSerializer(many=True)
    time_limit_s = serializers.IntegerField()
    deadline_in_s = serializers.FloatField(help_text="Seconds left until rented_at + time limit (server clock).")
    grace_s = serializers.FloatField()
    env = serializers.DictField(child=serializers.CharField())
    spec = serializers.DictField(help_text="The validated job spec, normalised (SPEC §2).")
    output_max_bytes = serializers.IntegerField()
    array_index = serializers.IntegerField(allow_null=True)
    array_size = serializers.IntegerField(allow_null=True)
    input_scope = InputScopeSerializer(required=False)
    # Issue 23: only to the node holding the attempt; the agent keeps them in memory only.
    secrets = serializers.DictField(child=serializers.CharField(), required=False,
                                    help_text="work.secrets: name -> value, into the job's environment.")
    credentials = serializers.DictField(child=serializers.CharField(), required=False,
                                        help_text="data[i].credentials and work.image_credentials: secret name -> "
                                                  "its JSON (storage options, or a registry login).")
    start_refused = serializers.CharField(required=False,
                                          help_text="The attempt fails at its start (start_failed) with this reason.")
    gang = GangNodeSerializer(many=True, required=False, help_text="The attempt's nodes, rank 0 first (E31_HOSTFILE).")
    checkpoint = CheckpointPlanSerializer(required=False, help_text="The spec's checkpoint and the version to restore.")
    gang_net = GangNetSerializer(required=False, help_text="A multi-node attempt's own network (SPEC §6).")


class DataInputSerializer(serializers.Serializer):
    source = serializers.CharField()
    target = serializers.CharField()
    sha256 = serializers.CharField(allow_null=True, required=False)
    extract = serializers.BooleanField(required=False)
    credentials = serializers.CharField(required=False, help_text="The name of the owner's secret for this source.")


class PrestageOfferSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    new = serializers.BooleanField()
    data = DataInputSerializer(many=True)
    input_scope = InputScopeSerializer(required=False)
    image = serializers.CharField(required=False)  # issue 23: work.image to pull anonymously while queued


class WorkAnswerSerializer(serializers.Serializer):
    assignments = AssignmentSerializer(many=True)
    cancel = AttemptRefSerializer(many=True)
    prestage = PrestageOfferSerializer(many=True)


class ReportAnswerSerializer(serializers.Serializer):
    duplicate = serializers.BooleanField(help_text="True: this (job, attempt, rank, seq) was applied before.")


class ReportResultSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(allow_null=True)
    seq = serializers.IntegerField(allow_null=True)
    status = serializers.IntegerField(help_text="What the single call would have answered: 200, 400, 404, 409, "
                                                "500, 503 (not applied: send it again).")
    duplicate = serializers.BooleanField(required=False)
    detail = serializers.CharField(required=False)
    code = serializers.ChoiceField(choices=[c.value for c in ErrorCode], required=False)
    errors = serializers.DictField(required=False)


class ReportBatchAnswerSerializer(serializers.Serializer):
    results = ReportResultSerializer(many=True)


class LogAnswerSerializer(serializers.Serializer):
    size = serializers.IntegerField(help_text="Bytes of the log the server holds (below offset + chunk: its cap).")


class BundleStatusAnswerSerializer(serializers.Serializer):
    received_bytes = serializers.IntegerField()
    complete = serializers.BooleanField()
    direct = serializers.BooleanField(required=False, help_text="The server takes the bundle straight to its "
                                      "object store: POST bundle/direct/ (issue 15).")
    verifying = serializers.BooleanField(required=False, help_text="Joined in the store, being verified.")
    refused = serializers.CharField(required=False, help_text="Why the last direct upload was refused "
                                    "(upload it again), or empty.")


class BundleDirectSerializer(serializers.Serializer):
    size_bytes = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0)


class BundleDirectPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    offset = serializers.IntegerField()
    size_bytes = serializers.IntegerField()
    url = serializers.CharField(help_text="PUT the part's bytes here (signed for this part alone).")


class BundleDirectUploadedSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    size_bytes = serializers.IntegerField()


class BundleDirectAnswerSerializer(serializers.Serializer):
    upload_id = serializers.CharField()
    part_bytes = serializers.IntegerField()
    parts = BundleDirectPartSerializer(many=True, help_text="Parts still to send.")
    uploaded = BundleDirectUploadedSerializer(many=True, help_text="Parts the store holds already.")
    expires_in_s = serializers.IntegerField()


class BundleChunkAnswerSerializer(serializers.Serializer):
    received_bytes = serializers.IntegerField()


class BundleCompleteAnswerSerializer(serializers.Serializer):
    size_bytes = serializers.IntegerField()
    sha256 = serializers.CharField()
    verifying = serializers.BooleanField(required=False, help_text="202: joined in the object store and being "
                                         "verified; ask GET bundle/ until complete (or refused).")


class GpuSampleSerializer(serializers.Serializer):
    """One GPU of a usage sample, from NVML (None: NVML could not say)."""

    index = serializers.IntegerField(min_value=0, max_value=1023)
    gpu_util_percent = serializers.IntegerField(min_value=0, max_value=100, allow_null=True)
    gpu_memory_bytes = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, allow_null=True)


SAMPLE_AGE_MAX_S = 7 * 24 * 3600  # seconds; an agent keeps an hour of samples through an outage


class SampleSerializer(serializers.Serializer):
    """The job's usage at one moment (docs/agent-protocol.md, "samples")."""

    seq = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    ago_s = serializers.FloatField(min_value=0, max_value=SAMPLE_AGE_MAX_S)
    cpu_percent = serializers.FloatField(min_value=0, max_value=100.0 * 100_000)  # percent of one CPU
    rss_bytes = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    gpus = GpuSampleSerializer(many=True, required=False, default=list, max_length=1024)

    def validate(self, attrs: dict) -> dict:
        for name in ("ago_s", "cpu_percent"):
            if attrs[name] != attrs[name]:  # NaN passes min/max checks
                raise serializers.ValidationError({name: ["Must be a number."]})
        return attrs


class SamplesSerializer(serializers.Serializer):
    gpu_source = serializers.ChoiceField(choices=[s.value for s in HealthSource])
    samples = SampleSerializer(many=True, min_length=1, max_length=SAMPLES_PER_POST_MAX)


class SamplesAnswerSerializer(serializers.Serializer):
    stored = serializers.IntegerField(help_text="Samples of this post newly stored (a repeat stores none).")
