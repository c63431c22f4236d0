"""Service tokens (issue 25 item 5, SPEC §9): a token a project's owner makes for CI, acting for the
project with a role, not as a person.

Each token gets a bot user of its own (``svc-<project>-<n>``, no password, so it cannot sign in)
that is a member of the project with the token's role (``Membership.service``), as GitLab's project
access tokens do: every check (:mod:`apps.projects.access`), the jobs it may see and the project its
submits go to then hold for it exactly as for a member, with no second path. The key is stored
hashed as a user's token is (:mod:`apps.tokens.models`); revoking deletes it and turns the bot
user off (its jobs stay in the project, owned by it).
"""
from __future__ import annotations

import secrets as pysecrets

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from apps.core import clock
from apps.projects.access import Action, role_of
from apps.projects.models import Membership, Project, Role
from apps.projects.services import ProjectError, role_check

from .models import ApiToken
from .services import token_create

SERVICE_ROLES = (Role.ADMIN, Role.MEMBER, Role.VIEWER)  # a token is never an owner


@transaction.atomic
def service_token_create(*, actor, project: Project, name: str, role: str) -> tuple[ApiToken, str]:
    """A new service token of ``project`` named ``name`` with ``role``: ``(token, key)``, the key this once.

    Raises:
        ProjectError: ``actor`` is not an owner (403; a stranger: 404), the personal project or a
            bad role (400 naming ``project`` or ``role``).
        django.core.exceptions.ValidationError: a bad name (``{"name": ...}``), as for a user's token.
    """
    role_check(actor, project, Action.BUDGET)
    if project.is_personal:
        raise ProjectError("project", "A personal project has no service tokens: create a project for CI.")
    if role not in SERVICE_ROLES:
        raise ProjectError("role", f"role must be one of {', '.join(SERVICE_ROLES)}.")
    username = f"svc-{project.name}-{pysecrets.token_hex(3)}"[:150]
    bot = get_user_model().objects.create_user(username=username, password=None)  # unusable password
    Membership.objects.create(project=project, user=bot, role=role, service=True, added_at=clock.now())
    token, key = token_create(user=bot, name=name)
    ApiToken.objects.filter(pk=token.pk).update(project=project)
    token.project = project
    return token, key


def service_tokens(*, actor, project: Project) -> QuerySet[ApiToken]:
    """``project``'s service tokens, newest first (any member may list them; never a key).

    Raises:
        ProjectError: (404) ``actor`` is not a member.
    """
    if role_of(actor, project) is None:
        raise ProjectError("project", f"You are in no project named {project.name!r}.", status=404)
    return ApiToken.objects.filter(project=project).select_related("user").order_by("-created_at", "-id")


def service_token_role(token: ApiToken) -> str:
    """The role ``token`` acts with (its bot user's membership)."""
    return role_of(token.user, token.project_id) or ""


@transaction.atomic
def service_token_revoke(*, actor, project: Project, prefix: str) -> None:
    """Revoke ``project``'s service token whose key starts with ``prefix``: it stops authenticating the
    next request and its bot user is turned off.

    Raises:
        ProjectError: ``actor`` is not an owner (403/404), or no such token (404 naming ``prefix``).
    """
    role_check(actor, project, Action.BUDGET)
    token = ApiToken.objects.filter(project=project, prefix=prefix).select_related("user").first()
    if token is None:
        raise ProjectError("prefix", f"Project {project.name} has no token {prefix!r}.", status=404)
    bot = token.user
    token.delete()
    Membership.objects.filter(project=project, user=bot).delete()
    bot.is_active = False
    bot.save(update_fields=["is_active"])
