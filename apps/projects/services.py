"""Projects and their members: the one door that writes them (issue 25 item 1).

Every change is checked with :mod:`apps.projects.access` against the acting user and raises
:class:`ProjectError` with the field it is about, which the API answers as a 400 (or 403/404 by
``status``).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count

from apps.core import clock

from .access import Action, refusal, role_allows, role_of
from .models import NAME_RULE, Membership, Project, Role


@dataclass
class ProjectError(Exception):
    """A refused change: ``field`` is the request's field it is about, ``status`` the HTTP answer
    (400 bad value, 403 not allowed, 404 no such project for this user)."""

    field: str
    message: str
    status: int = 400

    def __str__(self) -> str:
        return self.message


def personal_name(user) -> str:
    """The personal project's name: ``~username`` (a name no created project can take)."""
    return f"~{user.username}"


def personal_project(user, now: datetime | None = None) -> Project:
    """``user``'s personal project, made (with ``user`` its owner) the first time it is needed."""
    project = Project.objects.filter(personal_of=user).first()
    if project is not None:
        return project
    now = now or clock.now()
    with transaction.atomic():
        project, made = Project.objects.get_or_create(personal_of=user, defaults={
            "name": personal_name(user), "created_at": now})
        if made:
            Membership.objects.create(project=project, user=user, role=Role.OWNER, added_at=now)
    return project


def project_for(user, name: str) -> Project:
    """Project ``name`` as ``user`` sees it (``~username`` is theirs).

    Raises:
        ProjectError: (404) no such project, or ``user`` is not a member (answered alike).
    """
    if name == personal_name(user):
        return personal_project(user)
    if not isinstance(name, str) or "\x00" in name or len(name) > 63:
        raise ProjectError("project", "You are in no project of that name.", status=404)
    project = Project.objects.filter(name=name).first()
    if project is None or role_of(user, project) is None:
        raise ProjectError("project", f"You are in no project named {name!r}.", status=404)
    return project


def submit_project(user, name: str | None) -> Project:
    """The project a submit by ``user`` goes to: ``name``, or their personal project when None.

    A service token's bot user has no personal project: its default is the token's project.

    Raises:
        ProjectError: (400, field ``project``) not a member, or a viewer.
    """
    if name is None:
        personal = Project.objects.filter(personal_of=user).first()  # one query on the common path
        if personal is not None:
            return personal
        service = Membership.objects.filter(user=user, service=True).select_related("project").first()
        if service is None:
            return personal_project(user)
        name = service.project.name
    try:
        project = project_for(user, name)
    except ProjectError as e:
        raise ProjectError("project", e.message) from None
    role = role_of(user, project)
    if not role_allows(role, Action.SUBMIT):
        raise ProjectError("project", refusal(project, role, Action.SUBMIT))
    return project


def projects_of(user) -> list[tuple[Project, str]]:
    """``user``'s projects with their role, the personal one first (made if missing; a service
    token's bot user has none: it acts for its project alone). Each project carries
    ``member_count``, counted in the same query."""
    if not Membership.objects.filter(user=user, service=True).exists():
        personal_project(user)
    rows = (Membership.objects.filter(user=user).select_related("project")
            .annotate(members=Count("project__memberships")).order_by("project__name"))
    out = []
    for m in rows:
        m.project.member_count = m.members
        out.append((m.project, m.role))
    return sorted(out, key=lambda pr: (not pr[0].is_personal, pr[0].name))


def submit_choices(user) -> list[tuple[str, str]]:
    """The projects ``user`` may submit to, as form choices ``(name, label)``, the personal one first
    (labelled "personal")."""
    return [(p.name, f"{p.name} (personal)" if p.is_personal else p.name)
            for p, role in projects_of(user) if role_allows(role, Action.SUBMIT)]


def role_check(actor, project: Project, action: Action) -> str:
    """``actor``'s role in ``project`` when it allows ``action``.

    Raises:
        ProjectError: a stranger (404, field ``project``), or a role that does not allow it (403,
            field ``role``, :func:`apps.projects.access.refusal`'s words).
    """
    role = role_of(actor, project)
    if role is None:
        raise ProjectError("project", f"You are in no project named {project.name!r}.", status=404)
    if not role_allows(role, action):
        raise ProjectError("role", refusal(project, role, action), status=403)
    return role


def project_create(*, owner, name: str, now: datetime | None = None) -> Project:
    """A new project named ``name`` with ``owner`` its owner.

    Raises:
        ProjectError: (400, field ``name``) a bad name or one taken.
    """
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise ProjectError("name", f"A project needs a name: {NAME_RULE}.")
    project = Project(name=name, created_at=now or clock.now())
    try:
        project.full_clean(exclude=["personal_of", "created_at"], validate_unique=False)
    except ValidationError as e:
        raise ProjectError("name", " ".join(e.message_dict.get("name", ["Not a valid name."]))) from None
    try:
        with transaction.atomic():
            project.save()
            Membership.objects.create(project=project, user=owner, role=Role.OWNER, added_at=project.created_at)
    except IntegrityError:
        raise ProjectError("name", f"A project named {name!r} exists already.") from None
    return project


def _find_user(who: str):
    users = get_user_model().objects.filter(is_active=True)
    user = users.filter(username=who).first()
    if user is None and "@" in who:
        found = list(users.filter(email__iexact=who)[:2])
        user = found[0] if len(found) == 1 else None
    return user


def _role_value(role) -> str:
    if role not in Role.values:
        raise ProjectError("role", f"role must be one of {', '.join(Role.values)}.")
    return role


def _owners_left(project: Project, without_user_id: int) -> int:
    return project.memberships.filter(role=Role.OWNER, service=False).exclude(user_id=without_user_id).count()


def member_add(*, actor, project: Project, who: str, role: str, now: datetime | None = None) -> Membership:
    """Add the user named ``who`` (a username, or an e-mail that one user has) with ``role``.

    Only owners make owners. Raises:
        ProjectError: not allowed (403), the personal project (400 ``project``), no such user
            (400 ``username``), already a member (400 ``username``), a bad role (400 ``role``).
    """
    actor_role = role_check(actor, project, Action.MEMBERS)
    role = _role_value(role)
    if project.is_personal:
        raise ProjectError("project", "A personal project has no other members: create a project to share.")
    if role == Role.OWNER and actor_role != Role.OWNER:
        raise ProjectError("role", "Only an owner can make an owner.", status=403)
    user = _find_user(who) if isinstance(who, str) else None
    if user is None:
        raise ProjectError("username", f"No user {who!r}.")
    try:
        with transaction.atomic():
            return Membership.objects.create(project=project, user=user, role=role, added_at=now or clock.now())
    except IntegrityError:
        raise ProjectError("username", f"{user.username} is a member already.") from None


def _membership(project: Project, username: str) -> Membership:
    m = project.memberships.filter(user__username=username).select_related("user").first()
    if m is None:
        raise ProjectError("username", f"{username} is not a member of {project.name}.", status=404)
    return m


def member_set_role(*, actor, project: Project, username: str, role: str) -> Membership:
    """Change a member's role. Only owners touch owners; the last owner stays one.

    Raises:
        ProjectError: as :func:`member_add`; 400 ``role`` when it would leave no owner.
    """
    actor_role = role_check(actor, project, Action.MEMBERS)
    role = _role_value(role)
    m = _membership(project, username)
    if Role.OWNER in (role, m.role) and actor_role != Role.OWNER:
        raise ProjectError("role", "Only an owner can make or change an owner.", status=403)
    if m.role == Role.OWNER and role != Role.OWNER and not _owners_left(project, m.user_id):
        raise ProjectError("role", "A project keeps at least one owner: make another owner first.")
    m.role = role
    m.save(update_fields=["role"])
    return m


def member_remove(*, actor, project: Project, username: str) -> None:
    """Remove a member (a member may remove themself). Their jobs stay in the project.

    Raises:
        ProjectError: as :func:`member_set_role`.
    """
    m = _membership(project, username)
    if m.user_id != actor.pk:
        actor_role = role_check(actor, project, Action.MEMBERS)
        if m.role == Role.OWNER and actor_role != Role.OWNER:
            raise ProjectError("role", "Only an owner can remove an owner.", status=403)
    if m.role == Role.OWNER and not _owners_left(project, m.user_id):
        raise ProjectError("username", "A project keeps at least one owner: make another owner first.")
    m.delete()


def members_of(*, actor, project: Project) -> list[Membership]:
    """The members of ``project`` (``actor`` must be one), owners first."""
    role_check(actor, project, Action.VIEW)
    order = {r: i for i, r in enumerate(Role.values)}
    return sorted(project.memberships.select_related("user"), key=lambda m: (order[m.role], m.user.username))


def project_set_budget(*, actor, project: Project, budget, alert_percent=None) -> Project:
    """The owner's monthly ``budget`` (USD, a decimal string or number; None: none) and alert
    threshold for ``project``: it can only lower the operator's ``spend_limit`` (SPEC §9).

    Raises:
        ProjectError: not an owner (403/404), a budget that is not an amount of at least 0 or above
            the operator's limit (400 ``budget``), a threshold outside 1..100 (400 ``alert_percent``).
    """
    role_check(actor, project, Action.BUDGET)
    if budget is not None:
        try:
            budget = Decimal(str(budget)).quantize(Decimal("0.01"))
        except (InvalidOperation, ValueError):
            raise ProjectError("budget", "budget must be an amount in USD, e.g. 250.00, or null.") from None
        if not budget.is_finite() or budget < 0 or budget >= Decimal("1e10"):
            raise ProjectError("budget", "budget must be an amount in USD from 0, or null.")
        if project.spend_limit is not None and budget > project.spend_limit:
            raise ProjectError("budget", f"The operator's limit is ${project.spend_limit}: a budget can only be lower.")
    if alert_percent is not None:
        if isinstance(alert_percent, bool) or not isinstance(alert_percent, int) or not 1 <= alert_percent <= 100:
            raise ProjectError("alert_percent", "alert_percent must be a whole number from 1 to 100.")
        project.alert_percent = alert_percent
    project.budget = budget
    project.save(update_fields=["budget", "alert_percent"])
    return project


def project_delete(*, actor, project: Project) -> None:
    """Delete ``project`` (owners only), its memberships, secrets and service tokens with it. A
    project that holds jobs stays: their bills and outputs name it.

    Raises:
        ProjectError: not an owner (403/404), the personal project or one with jobs (400 ``project``).
    """
    role_check(actor, project, Action.DELETE)
    if project.is_personal:
        raise ProjectError("project", "A personal project cannot be deleted.")
    if project.jobs.exists():
        raise ProjectError("project", f"Project {project.name} has jobs: it stays, as their bills and outputs "
                                      "name it. Remove its members instead.")
    with transaction.atomic():
        bots = list(project.memberships.filter(service=True).values_list("user_id", flat=True))
        project.delete()
        get_user_model().objects.filter(pk__in=bots).update(is_active=False)
