"""``/api/v1/projects/`` (SPEC §9): a user's projects, making one, and its members. The wire only:
every rule is :mod:`apps.projects.services` and :mod:`apps.projects.access`."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..access import role_of
from ..models import Membership, Project, Role
from ..services import (
    ProjectError,
    member_add,
    member_remove,
    member_set_role,
    members_of,
    project_create,
    project_delete,
    project_for,
    project_set_budget,
    projects_of,
)


class ProjectOut(serializers.Serializer):
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices, help_text="The caller's role in it.")
    personal = serializers.BooleanField(help_text="The caller's personal project (~username), the default.")
    members = serializers.IntegerField()
    spend_limit = serializers.CharField(allow_null=True, help_text="The operator's monthly limit, USD.")
    budget = serializers.CharField(allow_null=True, help_text="The owner's monthly budget, USD (lower).")
    alert_percent = serializers.IntegerField()


class MemberOut(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


def project_out(project: Project, role: str) -> dict:
    return {"name": project.name, "role": role, "personal": project.is_personal,
            "members": getattr(project, "member_count", None) or project.memberships.count(),
            "spend_limit": None if project.spend_limit is None else str(project.spend_limit),
            "budget": None if project.budget is None else str(project.budget), "alert_percent": project.alert_percent}


def member_out(m: Membership) -> dict:
    return {"username": m.user.username, "role": m.role}


class Unavailable(APIException):
    status_code = 503
    default_detail = "This cannot be done now."


def api_error(e: ProjectError) -> APIException:
    """The API's answer to a refused change: 404/403/503 with ``detail``, else 400 naming the field."""
    if e.status == 404:
        return NotFound(e.message)
    if e.status == 403:
        return PermissionDenied(e.message)
    if e.status == 503:
        return Unavailable(e.message)
    return ValidationError({e.field: [e.message]})


@contextmanager
def project_errors() -> Iterator[None]:
    """Answer a :class:`~apps.projects.services.ProjectError` raised inside as :func:`api_error` does."""
    try:
        yield
    except ProjectError as e:
        raise api_error(e) from None


def _body(request) -> dict:
    return request.data if hasattr(request.data, "get") else {}


def project_or_error(request, name: str) -> Project:
    """Project ``name`` as the caller sees it; a stranger gets NotFound."""
    with project_errors():
        return project_for(request.user, name)


class ProjectListView(APIView):
    @extend_schema(responses=inline_serializer("ProjectList", {"results": ProjectOut(many=True)}))
    def get(self, request):
        return Response({"results": [project_out(p, r) for p, r in projects_of(request.user)]})

    @extend_schema(request=inline_serializer("ProjectIn", {"name": serializers.CharField()}),
                   responses={201: ProjectOut})
    def post(self, request):
        with project_errors():
            project = project_create(owner=request.user, name=_body(request).get("name"))
        return Response(project_out(project, Role.OWNER), status=201)


class ProjectDetailView(APIView):
    @extend_schema(responses=ProjectOut)
    def get(self, request, name: str):
        project = project_or_error(request, name)
        return Response(project_out(project, role_of(request.user, project)))

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        """Delete a project without jobs (owners only)."""
        project = project_or_error(request, name)
        with project_errors():
            project_delete(actor=request.user, project=project)
        return Response(status=204)

    @extend_schema(request=inline_serializer("ProjectBudget", {"budget": serializers.CharField(allow_null=True),
                                                               "alert_percent": serializers.IntegerField()}),
                   responses=ProjectOut)
    def patch(self, request, name: str):
        """The owner's budget and alert threshold (owners only)."""
        project, body = project_or_error(request, name), _body(request)
        with project_errors():
            project = project_set_budget(actor=request.user, project=project, budget=body.get("budget"),
                                         alert_percent=body.get("alert_percent"))
        return Response(project_out(project, role_of(request.user, project)))


class MemberListView(APIView):
    @extend_schema(responses=inline_serializer("MemberList", {"results": MemberOut(many=True)}))
    def get(self, request, name: str):
        project = project_or_error(request, name)
        return Response({"results": [member_out(m) for m in members_of(actor=request.user, project=project)]})

    @extend_schema(request=inline_serializer("MemberIn", {"username": serializers.CharField(),
                                                          "role": serializers.CharField()}),
                   responses={201: MemberOut})
    def post(self, request, name: str):
        project, body = project_or_error(request, name), _body(request)
        with project_errors():
            m = member_add(actor=request.user, project=project, who=body.get("username"),
                           role=body.get("role", Role.MEMBER))
        return Response(member_out(m), status=201)


class MemberDetailView(APIView):
    @extend_schema(request=inline_serializer("MemberRole", {"role": serializers.CharField()}), responses=MemberOut)
    def patch(self, request, name: str, username: str):
        project = project_or_error(request, name)
        with project_errors():
            m = member_set_role(actor=request.user, project=project, username=username,
                                role=_body(request).get("role"))
        return Response(member_out(m))

    @extend_schema(responses={204: None})
    def delete(self, request, name: str, username: str):
        project = project_or_error(request, name)
        with project_errors():
            member_remove(actor=request.user, project=project, username=username)
        return Response(status=204)
