"""``GET /api/v1/jobs/{id}/metrics/``: the job's usage series (CPU, memory, GPU) as its agent
sampled them (SPEC §7). Owner or staff; anyone else gets 404."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..selectors import job_visible_or_404
from ..services.samples import samples_series

GPU_SERIES = inline_serializer("JobMetricsGpu", {
    "index": serializers.IntegerField(help_text="The node's GPU index."),
    "gpu_util_percent": serializers.ListField(child=serializers.IntegerField(allow_null=True),
                                              help_text="Percent of NVML's sample period the GPU was busy."),
    "gpu_memory_bytes": serializers.ListField(child=serializers.IntegerField(allow_null=True),
                                              help_text="Device memory in use, bytes."),
}, many=True)
NODE_SERIES = inline_serializer("JobMetricsNode", {
    "node_rank": serializers.IntegerField(),
    "gpu_source": serializers.CharField(
        help_text="nvml: real GPU figures; simulated (a --simulate node) and none: no GPU series."),
    "at_epoch_s": serializers.ListField(child=serializers.FloatField(),
                                        help_text="When each sample was taken, seconds since 1970 (UTC)."),
    "cpu_percent": serializers.ListField(child=serializers.FloatField(),
                                         help_text="CPU of the job's processes, percent of one CPU."),
    "rss_bytes": serializers.ListField(child=serializers.IntegerField(),
                                       help_text="Resident memory of the job's processes, bytes."),
    "gpus": GPU_SERIES,
}, many=True)


class JobMetricsView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("attempt", int, description="The attempt (default: the current one).")],
        responses=inline_serializer("JobMetrics", {
            "job_id": serializers.IntegerField(),
            "attempt": serializers.IntegerField(),
            "samples_max": serializers.IntegerField(
                help_text="Samples kept per attempt and node; past it older ones are thinned (every other)."),
            "nodes": NODE_SERIES,
        }),
        description="The job's usage over its run, sampled by the agent every few seconds: CPU and "
                    "resident memory of its process tree and, on real GPUs, each GPU's utilisation and "
                    "memory in use. One entry per node rank that sent samples; the arrays of a node are "
                    "aligned with `at_epoch_s`. `nodes` is empty before the run, or for a job run by an "
                    "agent that does not sample. Owner or staff; anyone else gets 404.",
    )
    def get(self, request, pk: int):
        job = job_visible_or_404(request.user, pk)
        raw = request.query_params.get("attempt")
        attempt = job.attempt
        if raw is not None:
            try:
                attempt = int(raw)
            except ValueError:
                attempt = 0
            if not 1 <= attempt <= job.attempt:
                raise ValidationError({"attempt": [f"Must be between 1 and {job.attempt}."]})
        return Response(samples_series(job, attempt))
