"""``/api/v1/account/tokens/`` (SPEC §7, issue 28): create, list and revoke the caller's API tokens.

The key is in the answer to the create, this once; only its hash and prefix are stored, so a list never
carries it. The rules are in :mod:`apps.tokens.services`; these views parse, call them and render.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.projects.api.views import api_error, project_errors, project_or_error
from apps.projects.services import ProjectError
from apps.tokens.models import NAME_MAX, ApiToken
from apps.tokens.service_tokens import service_token_create, service_token_revoke, service_token_role, service_tokens
from apps.tokens.services import token_create, token_list, token_revoke


class TextField(serializers.CharField):
    """A CharField that takes text only: DRF's would turn ``123`` into ``"123"``."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class TokenIn(serializers.Serializer):
    name = TextField(max_length=NAME_MAX, required=False, allow_blank=True, default="",
                                 help_text="Your label for the token, e.g. \"laptop\" (at most 100 characters).")


class TokenOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first 8 characters, to tell tokens apart.")
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True,
                                             help_text="When it last authenticated a request (to the minute).")


class TokenCreatedOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    key = serializers.CharField(help_text="The key, shown this once: send it as `Authorization: Token <key>`.")


def token_out(token: ApiToken) -> dict:
    return {"id": token.pk, "name": token.name, "prefix": token.prefix, "created_at": token.created_at,
            "last_used_at": token.last_used_at}


class TokenListView(APIView):
    @extend_schema(responses=inline_serializer("TokenList", {"results": TokenOut(many=True)}))
    def get(self, request):
        """My API tokens, newest first: never a key."""
        return Response({"results": TokenOut([token_out(t) for t in token_list(user=request.user)],
                                             many=True).data})

    @extend_schema(request=TokenIn, responses={201: TokenCreatedOut})
    def post(self, request):
        """A new API token; its ``key`` is in this answer only. 400 naming ``name`` for a bad one."""
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            token, key = token_create(user=request.user, name=data.validated_data["name"])
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        body = {**token_out(token), "key": key}
        # The key is in this answer only: no cache (a browser's, a proxy's) may keep it.
        return Response(TokenCreatedOut(body).data, status=status.HTTP_201_CREATED,
                        headers={"Cache-Control": "no-store"})


class TokenDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, pk: int):
        """Revoke my token ``pk`` at once (204); 404 where I have none of that id."""
        try:
            token_revoke(user=request.user, token_id=pk)
        except ApiToken.DoesNotExist:
            raise NotFound("You have no token of that id.") from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceTokenIn(serializers.Serializer):
    name = TextField(max_length=NAME_MAX, required=False, allow_blank=True, default="",
                     help_text="What the token is for, e.g. \"ci\" (at most 100 characters).")
    role = TextField(help_text="The role it acts with: admin, member or viewer.")


class ServiceTokenOut(serializers.Serializer):
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first 8 characters, to tell tokens apart.")
    role = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)


def service_token_out(token: ApiToken) -> dict:
    return {"name": token.name, "prefix": token.prefix, "role": service_token_role(token),
            "created_at": token.created_at, "last_used_at": token.last_used_at}


class ServiceTokenListView(APIView):
    """``/api/v1/projects/{name}/tokens/`` (SPEC §9): a project's service tokens."""

    @extend_schema(responses=inline_serializer("ServiceTokenList", {"results": ServiceTokenOut(many=True)}))
    def get(self, request, name: str):
        project = project_or_error(request, name)
        with project_errors():
            tokens = service_tokens(actor=request.user, project=project)
        return Response({"results": [service_token_out(t) for t in tokens]})

    @extend_schema(request=ServiceTokenIn, responses={201: ServiceTokenOut})
    def post(self, request, name: str):
        """A new service token (owners only); its ``key`` is in this answer only."""
        project = project_or_error(request, name)
        data = ServiceTokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            token, key = service_token_create(actor=request.user, project=project, **data.validated_data)
        except ProjectError as e:
            raise api_error(e) from None
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response({**service_token_out(token), "key": key}, status=status.HTTP_201_CREATED,
                        headers={"Cache-Control": "no-store"})


class ServiceTokenDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, prefix: str):
        """Revoke the project's token ``prefix`` at once (owners only)."""
        project = project_or_error(request, name)
        with project_errors():
            service_token_revoke(actor=request.user, project=project, prefix=prefix)
        return Response(status=204)
