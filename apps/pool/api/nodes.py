"""``GET /api/v1/nodes/``: every node with its GPUs and their health (staff only)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from ..models import Node


class GpuOutSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    model = serializers.CharField()
    memory_mb = serializers.IntegerField()
    present = serializers.BooleanField()
    quarantine_reason = serializers.CharField(
        help_text="Why no job gets this GPU (held back as unclean, SPEC §5); empty when clean.")
    quarantined_at = serializers.DateTimeField(allow_null=True, help_text="Since when; null when clean.")


class GpuHealthOutSerializer(serializers.Serializer):
    index = serializers.IntegerField(allow_null=True)
    uuid = serializers.CharField()
    temperature_c = serializers.IntegerField(allow_null=True)
    utilization_pct = serializers.IntegerField(allow_null=True)
    memory_used_mb = serializers.IntegerField(allow_null=True)
    ecc_uncorrected = serializers.IntegerField(allow_null=True)
    ecc_corrected = serializers.IntegerField(allow_null=True)
    warning = serializers.CharField(help_text="Empty when the GPU looks healthy.")


class NodeOutSerializer(serializers.ModelSerializer):
    gpus = GpuOutSerializer(many=True)
    health = serializers.SerializerMethodField()
    health_source = serializers.SerializerMethodField()
    health_at = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "state", "drain", "hostname", "agent_version", "cpus", "memory_bytes", "disk_bytes",
                  "runtimes", "simulated", "sandboxed", "registered_at", "last_heartbeat_at", "gpus", "health",
                  "health_source", "health_at"]

    @extend_schema(responses=GpuHealthOutSerializer(many=True))
    def get_health(self, node: Node) -> list[dict]:
        return node.gpu_health()

    def get_health_source(self, node: Node) -> str:
        return (node.health or {}).get("source", "")

    def get_health_at(self, node: Node) -> str | None:
        return (node.health or {}).get("at")


class NodeListView(APIView):
    """Nodes, by name: state, hardware, container runtimes, GPUs and their last reported health."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=NodeOutSerializer(many=True))
    def get(self, request):
        nodes = Node.objects.prefetch_related("gpus").order_by("name")
        return Response(NodeOutSerializer(nodes, many=True).data)
