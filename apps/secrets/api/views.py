"""``/api/v1/secrets/`` (SPEC §7): set, list and delete the caller's secrets. Names and dates only:
a value goes in and never comes back."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core import clock
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
        existed = isinstance(name, str) and Secret.objects.filter(owner=request.user, name=name).exists()
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
