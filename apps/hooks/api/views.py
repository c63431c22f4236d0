"""``/api/v1/projects/{name}/webhooks/`` (SPEC "Webhooks"): register, list and delete a project's
webhooks and read their delivery log. The wire only: every rule is :mod:`apps.hooks.services`."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.projects.api.views import project_errors, project_or_error

from ..models import Event, Webhook, WebhookDelivery
from ..services import deliveries_of, webhook_create, webhook_delete, webhooks_of


class WebhookOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.URLField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=Event.choices))
    active = serializers.BooleanField()
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class WebhookCreated(WebhookOut):
    secret = serializers.CharField(help_text="The signing secret, shown this once.")


class DeliveryOut(serializers.Serializer):
    delivery_id = serializers.UUIDField()
    event = serializers.ChoiceField(choices=Event.choices)
    status = serializers.CharField()
    attempts = serializers.IntegerField()
    last_status_code = serializers.IntegerField(allow_null=True, help_text="The receiver's last answer.")
    last_error = serializers.CharField()
    next_try_at = serializers.DateTimeField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


def webhook_out(hook: Webhook) -> dict:
    return {"id": hook.pk, "url": hook.url, "events": list(hook.events), "active": hook.active,
            "created_by": hook.created_by.username if hook.created_by else None, "created_at": hook.created_at}


def delivery_out(d: WebhookDelivery) -> dict:
    return {"delivery_id": d.delivery_id, "event": d.event, "status": d.status, "attempts": d.attempts,
            "last_status_code": d.last_status_code, "last_error": d.last_error, "next_try_at": d.next_try_at,
            "delivered_at": d.delivered_at, "created_at": d.created_at}


class WebhookListView(APIView):
    @extend_schema(responses=inline_serializer("WebhookList", {"results": WebhookOut(many=True)}))
    def get(self, request, name: str):
        with project_errors():
            hooks = webhooks_of(actor=request.user, project=project_or_error(request, name))
        return Response({"results": WebhookOut([webhook_out(h) for h in hooks], many=True).data})

    @extend_schema(request=inline_serializer("WebhookIn", {
        "url": serializers.URLField(), "events": serializers.ListField(child=serializers.CharField())}),
        responses={201: WebhookCreated})
    def post(self, request, name: str):
        project = project_or_error(request, name)
        body = request.data if hasattr(request.data, "get") else {}
        with project_errors():
            hook, secret = webhook_create(actor=request.user, project=project, url=body.get("url"),
                                          events=body.get("events"))
        return Response(WebhookCreated({**webhook_out(hook), "secret": secret}).data, status=201)


class WebhookDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, webhook_id: int):
        with project_errors():
            webhook_delete(actor=request.user, project=project_or_error(request, name), webhook_id=webhook_id)
        return Response(status=204)


class DeliveryListView(APIView):
    @extend_schema(responses=inline_serializer("WebhookDeliveryList", {"results": DeliveryOut(many=True)}))
    def get(self, request, name: str, webhook_id: int):
        with project_errors():
            rows = deliveries_of(actor=request.user, project=project_or_error(request, name), webhook_id=webhook_id)
        return Response({"results": DeliveryOut([delivery_out(d) for d in rows], many=True).data})
