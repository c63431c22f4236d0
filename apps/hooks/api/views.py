"""``/api/v1/projects/{name}/webhooks/`` (SPEC "Webhooks"): register, list and delete a project's
webhooks and read their delivery log. The wire only: every rule is :mod:`apps.hooks.services`."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.projects.models import Project
from apps.projects.services import ProjectError, project_for

from ..models import Event, Webhook, WebhookDelivery
from ..services import deliveries_of, webhook_create, webhook_delete, webhooks_of


class Unavailable(APIException):
    status_code = 503
    default_detail = "Webhooks cannot be made now."


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


def api_error(e: ProjectError) -> APIException:
    """The answer to a refusal: 404/403/503 with ``detail``, else 400 naming the field."""
    if e.status == 404:
        return NotFound(e.message)
    if e.status == 403:
        return PermissionDenied(e.message)
    if e.status == 503:
        return Unavailable(e.message)
    return ValidationError({e.field: [e.message]})


def _project(request, name: str) -> Project:
    if "\x00" in name:  # no name holds one, and PostgreSQL refuses it in a query (a 500)
        raise NotFound(f"You are in no project named {name!r}.")
    try:
        return project_for(request.user, name)
    except ProjectError as e:
        raise api_error(e) from None


class WebhookListView(APIView):
    @extend_schema(responses=inline_serializer("WebhookList", {"results": WebhookOut(many=True)}))
    def get(self, request, name: str):
        try:
            hooks = webhooks_of(actor=request.user, project=_project(request, name))
        except ProjectError as e:
            raise api_error(e) from None
        return Response({"results": WebhookOut([webhook_out(h) for h in hooks], many=True).data})

    @extend_schema(request=inline_serializer("WebhookIn", {
        "url": serializers.URLField(), "events": serializers.ListField(child=serializers.CharField())}),
        responses={201: WebhookCreated})
    def post(self, request, name: str):
        project = _project(request, name)
        body = request.data if hasattr(request.data, "get") else {}
        try:
            hook, secret = webhook_create(actor=request.user, project=project, url=body.get("url"),
                                          events=body.get("events"))
        except ProjectError as e:
            raise api_error(e) from None
        return Response(WebhookCreated({**webhook_out(hook), "secret": secret}).data, status=201)


class WebhookDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, webhook_id: int):
        try:
            webhook_delete(actor=request.user, project=_project(request, name), webhook_id=webhook_id)
        except ProjectError as e:
            raise api_error(e) from None
        return Response(status=204)


class DeliveryListView(APIView):
    @extend_schema(responses=inline_serializer("WebhookDeliveryList", {"results": DeliveryOut(many=True)}))
    def get(self, request, name: str, webhook_id: int):
        try:
            rows = deliveries_of(actor=request.user, project=_project(request, name), webhook_id=webhook_id)
        except ProjectError as e:
            raise api_error(e) from None
        return Response({"results": DeliveryOut([delivery_out(d) for d in rows], many=True).data})
