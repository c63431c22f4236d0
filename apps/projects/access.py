"""Who may do what in a project: the one place that decides it (issue 25, SPEC §9).

Plain predicates over :class:`~apps.projects.models.Role`, not a rules package: the table is four
roles by seven actions, fixed by the contract, and a dict reads as the SPEC's table does;
``django-rules`` would add a registry and a template tag for the same lookups, and
``django-organizations`` models an invitation flow and one owner per organisation, where a project has
several owners and members are added by username. Views, the API, the WebSocket consumers, the CLI's
endpoints and the admin call these and nothing else.

A stranger (no membership) gets ``None`` from :func:`role_of` and may do nothing; the callers answer
404 for what they may not see, and 403 with :func:`refusal` for what they may see but not do.
"""
from __future__ import annotations

from enum import StrEnum

from django.db.models import Q

from .models import Membership, Project, Role


class Action(StrEnum):
    """What a member may be allowed to do in a project."""

    VIEW = "view"                # jobs, arrays, logs, metrics, outputs, receipts, usage
    SUBMIT = "submit"            # submit jobs; use the project's secrets and uploads
    CANCEL_ANY = "cancel_any"    # cancel any member's job (one's own: SUBMIT)
    MEMBERS = "members"          # add, change and remove members
    BUDGET = "budget"            # the owner's budget and alert, service tokens, webhooks
    SECRETS = "secrets"          # set and delete the project's secrets
    DELETE = "delete"            # delete the project


_ALLOWED: dict[str, frozenset[Action]] = {
    Role.OWNER: frozenset(Action),
    Role.ADMIN: frozenset({Action.VIEW, Action.SUBMIT, Action.CANCEL_ANY, Action.MEMBERS}),
    Role.MEMBER: frozenset({Action.VIEW, Action.SUBMIT}),
    Role.VIEWER: frozenset({Action.VIEW}),
}

_WHO_MAY = {Action.SUBMIT: "members, admins and owners", Action.CANCEL_ANY: "the job's owner, admins and owners",
            Action.MEMBERS: "admins and owners", Action.BUDGET: "owners", Action.SECRETS: "owners",
            Action.DELETE: "owners", Action.VIEW: "members"}


def role_of(user, project: Project | int | None) -> str | None:
    """``user``'s role in ``project`` (a project or its id), or None for a stranger, an anonymous
    user or no project. One query."""
    if project is None or not getattr(user, "is_authenticated", False):
        return None
    project_id = project.pk if isinstance(project, Project) else project
    return Membership.objects.filter(project_id=project_id, user_id=user.pk).values_list("role", flat=True).first()


def role_allows(role: str | None, action: Action) -> bool:
    """True when a member with ``role`` (None: a stranger) may do ``action``."""
    return role is not None and action in _ALLOWED.get(role, frozenset())


def may(user, project: Project | int | None, action: Action) -> bool:
    """True when ``user`` may do ``action`` in ``project``."""
    return role_allows(role_of(user, project), action)


def may_cancel(user, job) -> bool:
    """True when ``user`` may cancel ``job`` (or a :class:`~apps.jobs.models.JobArray`): it is theirs,
    they may cancel any job of its project, or they are an operator (staff, the admin's cancel
    action). A job with no project is its owner's alone."""
    if not getattr(user, "is_authenticated", False):
        return False
    if job.owner_id == user.pk or user.is_staff:
        return True
    return may(user, job.project_id, Action.CANCEL_ANY)


def refusal(project: Project | str, role: str | None, action: Action) -> str:
    """Why ``action`` is refused, in a user's words: "Your role in project ml-team is viewer; only
    members, admins and owners can submit." """
    name = project.name if isinstance(project, Project) else project
    verb = {Action.SUBMIT: "submit", Action.CANCEL_ANY: "cancel another member's job",
            Action.MEMBERS: "change members", Action.BUDGET: "change the budget, tokens and webhooks",
            Action.SECRETS: "change secrets", Action.DELETE: "delete it", Action.VIEW: "see it"}[action]
    if role is None:
        return f"You are not a member of project {name}."
    return f"Your role in project {name} is {role}; only {_WHO_MAY[action]} can {verb}."


def visible_project_ids(user):
    """A subquery of the ids of the projects ``user`` is a member of (any role); empty when anonymous."""
    if not getattr(user, "is_authenticated", False):
        return Membership.objects.none().values("project_id")
    return Membership.objects.filter(user_id=user.pk).values("project_id")


def shared_q(user, *, owner_field: str = "owner_id", project_field: str = "project_id") -> Q:
    """The rows (jobs, arrays) ``user`` may read: their own, and every one of a project they are a
    member of, in any role. Anonymous: none. One subquery, no join, no ``DISTINCT``."""
    if not getattr(user, "is_authenticated", False):
        return Q(pk__in=[])
    return Q(**{owner_field: user.pk}) | Q(**{f"{project_field}__in": visible_project_ids(user)})
