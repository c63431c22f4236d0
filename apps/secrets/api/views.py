"""``/api/v1/secrets/`` (SPEC §7): set, list and delete the caller's secrets. Names and dates only:
a value goes in and never comes back."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core import clock
from apps.projects.access import Action, refusal, role_allows, role_of
from apps.projects.api.views import project_or_error
from apps.secrets.models import Secret
from apps.secrets.services import SecretInvalid, secret_delete, secret_list, secret_name_problem, secret_set


class SecretOut(serializers.Serializer):
    name = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def secret_out(secret: Secret) -> dict:
    return {"name": secret.name, "created_at": secret.created_at, "updated_at": secret.updated_at}


class SecretListView(APIView):
    @extend_schema(responses=inline_serializer("SecretList", {"results": SecretOut(many=True)}))
    def get(self, request):
        return Response({"results": SecretOut([secret_out(s) for s in secret_list(owner=request.user)],
                                              many=True).data})

    @extend_schema(request=inline_serializer("SecretIn", {"name": serializers.CharField(),
                                                          "value": serializers.CharField()}),
                   responses={201: SecretOut, 200: SecretOut})
    def post(self, request):
        data = request.data if hasattr(request.data, "get") else {}
        name, value = data.get("name"), data.get("value")
        existed = isinstance(name, str) and Secret.objects.filter(owner=request.user, project__isnull=True,
                                                                  name=name).exists()
        try:
            secret = secret_set(owner=request.user, name=name, value=value, now=clock.now())
        except SecretInvalid as exc:
            raise ValidationError(exc.errors) from None
        return Response(SecretOut(secret_out(secret)).data, status=200 if existed else 201)


class SecretDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        if secret_name_problem(name) or not secret_delete(owner=request.user, name=name):
            raise NotFound("You have no secret of that name.")
        return Response(status=204)


def _project_for(request, name: str, action: Action):
    """Project ``name`` for a secrets call: 404 for a stranger, 403 with the reason for a role that
    may not do ``action``."""
    project = project_or_error(request, name)
    role = role_of(request.user, project)
    if not role_allows(role, action):
        raise PermissionDenied(refusal(project, role, action))
    if project.is_personal:
        raise NotFound("A personal project's secrets are your own: use /api/v1/secrets/.")
    return project


class ProjectSecretListView(APIView):
    """``/api/v1/projects/{name}/secrets/`` (SPEC §9): a project's secrets, usable by its jobs only.
    Members list the names; owners set them."""

    @extend_schema(responses=inline_serializer("ProjectSecretList", {"results": SecretOut(many=True)}))
    def get(self, request, name: str):
        project = _project_for(request, name, Action.VIEW)
        secrets = secret_list(owner=request.user, project_id=project.pk)
        return Response({"results": SecretOut([secret_out(s) for s in secrets], many=True).data})

    @extend_schema(request=inline_serializer("ProjectSecretIn", {"name": serializers.CharField(),
                                                                 "value": serializers.CharField()}),
                   responses={201: SecretOut, 200: SecretOut})
    def post(self, request, name: str):
        project = _project_for(request, name, Action.SECRETS)
        data = request.data if hasattr(request.data, "get") else {}
        secret_name, value = data.get("name"), data.get("value")
        existed = isinstance(secret_name, str) and Secret.objects.filter(project=project, name=secret_name).exists()
        try:
            secret = secret_set(owner=request.user, name=secret_name, value=value, now=clock.now(),
                                project_id=project.pk)
        except SecretInvalid as exc:
            raise ValidationError(exc.errors) from None
        return Response(SecretOut(secret_out(secret)).data, status=200 if existed else 201)


class ProjectSecretDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, secret: str):
        project = _project_for(request, name, Action.SECRETS)
        if secret_name_problem(secret) or not secret_delete(owner=request.user, name=secret, project_id=project.pk):
            raise NotFound("The project has no secret of that name.")
        return Response(status=204)
