"""``POST /api/v1/agent/prestage/``: an agent's progress pre-staging queued jobs' inputs.

Body ``{"jobs": [{"job_id", "state", "bytes_done", "bytes_total", "message"}]}``;
answer ``{"prestage": [job ids this node should still pre-stage]}``
(docs/agent-protocol.md, "Pre-staging"). Node token only.
"""
from __future__ import annotations

from e31_protocol import MESSAGE_MAX, PrestageState
from rest_framework import serializers
from rest_framework.response import Response

from apps.agent_api.api.bounds import BIGINT_MAX
from apps.agent_api.api.views import FIELD_ERRORS, AgentView, agent_schema
from apps.jobs.prestage import prestage_report


class PrestageItemSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(max_value=BIGINT_MAX, min_value=1)
    state = serializers.ChoiceField(choices=[s.value for s in PrestageState])  # JobPrestage.State, less planned
    bytes_done = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, default=0)
    bytes_total = serializers.IntegerField(max_value=BIGINT_MAX, min_value=0, allow_null=True, required=False,
                                           default=None)
    message = serializers.CharField(required=False, allow_blank=True, max_length=MESSAGE_MAX, default="")


class PrestageReportSerializer(serializers.Serializer):
    jobs = PrestageItemSerializer(many=True, max_length=1000)


class PrestageAnswerSerializer(serializers.Serializer):
    prestage = serializers.ListField(child=serializers.IntegerField(), help_text="Job ids still wanted here.")


class PrestageView(AgentView):
    @agent_schema("Progress of queued jobs' inputs fetched ahead (meter off)", request=PrestageReportSerializer,
                  responses={200: PrestageAnswerSerializer, 400: FIELD_ERRORS})
    def post(self, request):
        ser = PrestageReportSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        wanted = prestage_report(node=self.node, items=[dict(i) for i in ser.validated_data["jobs"]])
        return Response({"prestage": wanted})
