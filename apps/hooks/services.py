"""Webhooks of a project: the one door that writes them (issue 25 item 6).

Owners (:data:`~apps.projects.access.Action.BUDGET`) register and delete them; every member
(:data:`~apps.projects.access.Action.VIEW`) lists them and reads their delivery log. A refusal raises
:class:`~apps.projects.services.ProjectError` with the field it is about and its HTTP status, as the
projects' services do (404 for a stranger, 403 with :func:`~apps.projects.access.refusal`'s words).
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction

from apps.core import clock
from apps.projects.access import Action
from apps.projects.models import Project
from apps.projects.services import ProjectError, role_check
from apps.secrets import crypto

from .guard import url_problem
from .models import Event, Webhook, WebhookDelivery
from .signing import secret_new

MAX_PER_PROJECT = 20
DELIVERY_LOG_MAX = 200


def events_problem(events: object) -> tuple[list[str], str | None]:
    """``(events, problem)``: the event names of ``events`` in :class:`Event` order, or why it is not a
    non-empty list of them."""
    if not isinstance(events, list) or not events:
        return [], f"a non-empty list of events among {', '.join(Event.values)}"
    unknown = [e for e in events if not isinstance(e, str) or e not in Event.values]
    if unknown:
        return [], f"unknown event {unknown[0]!r}: events are among {', '.join(Event.values)}"
    return [e for e in Event.values if e in events], None


def webhook_create(*, actor, project: Project, url: object, events: object,
                   now: datetime | None = None) -> tuple[Webhook, str]:
    """Register ``url`` for ``events`` of ``project``'s jobs; returns the webhook and its signing
    secret, in clear this once (it is stored encrypted, :mod:`apps.secrets.crypto`).

    The URL's host is resolved and checked (:func:`apps.hooks.guard.url_problem`).

    Raises:
        ProjectError: a stranger (404); not an owner (403, field ``role``); a bad or refused URL (400
            ``url``), too many webhooks (400 ``url``); bad events (400 ``events``); the site's secrets
            key unusable (503 ``secret``).
    """
    role_check(actor, project, Action.BUDGET)
    names, problem = events_problem(events)
    if problem:
        raise ProjectError("events", problem)
    problem = url_problem(url)
    if problem:
        raise ProjectError("url", problem)
    secret = secret_new()
    try:
        token = crypto.encrypt(secret)
    except crypto.SecretsKeyError as exc:
        raise ProjectError("secret", f"Webhooks cannot be made now: {exc}. Ask the operator.", status=503) from None
    with transaction.atomic():
        # Locks the project row: closes the race of two registrations at once passing the cap.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        if Webhook.objects.filter(project=project).count() >= MAX_PER_PROJECT:
            raise ProjectError("url", f"A project has at most {MAX_PER_PROJECT} webhooks: delete one first.")
        hook = Webhook.objects.create(project=project, url=url, events=names, secret_token=token,
                                      created_by=actor, created_at=now or clock.now())
    return hook, secret


def webhooks_of(*, actor, project: Project) -> list[Webhook]:
    """The webhooks of ``project``, oldest first.

    Raises:
        ProjectError: a stranger (404).
    """
    role_check(actor, project, Action.VIEW)
    return list(Webhook.objects.filter(project=project).order_by("id"))


def _webhook(project: Project, webhook_id: int) -> Webhook:
    in_range = isinstance(webhook_id, int) and 0 < webhook_id < 2 ** 63  # a bigint: a longer one is no row
    hook = Webhook.objects.filter(project=project, pk=webhook_id).first() if in_range else None
    if hook is None:
        raise ProjectError("id", f"Project {project.name} has no webhook {webhook_id}.", status=404)
    return hook


def webhook_delete(*, actor, project: Project, webhook_id: int) -> None:
    """Delete webhook ``webhook_id`` of ``project`` and its delivery log; a try in flight finds it gone
    and sends nothing more.

    Raises:
        ProjectError: a stranger or no such webhook (404); not an owner (403).
    """
    role_check(actor, project, Action.BUDGET)
    _webhook(project, webhook_id).delete()


def deliveries_of(*, actor, project: Project, webhook_id: int,
                  limit: int = DELIVERY_LOG_MAX) -> list[WebhookDelivery]:
    """The delivery log of webhook ``webhook_id``: its last ``limit`` deliveries, newest first.

    Raises:
        ProjectError: a stranger or no such webhook (404).
    """
    role_check(actor, project, Action.VIEW)
    hook = _webhook(project, webhook_id)
    return list(hook.deliveries.order_by("-created_at", "-id")[:limit])
