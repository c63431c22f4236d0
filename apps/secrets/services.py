"""Set, delete and rotate users' secrets (:class:`Secret`); values go in and never come out,
except to :func:`secret_values`, which only the agents' assignment and the submit's checks call."""
from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from cryptography.fernet import Fernet, MultiFernet
from django.db import transaction
from django.db.models import Q

from . import crypto, signals
from .models import NAME_MAX, NAME_PATTERN, VALUE_MAX_BYTES, Secret

_NAME = re.compile(NAME_PATTERN)


class SecretInvalid(Exception):
    """A name or value that cannot be stored; ``errors`` maps the field to messages (an HTTP 400)."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def secret_name_problem(name: object) -> str | None:
    """Why ``name`` is not a secret name (``[A-Z_][A-Z0-9_]*``, at most 100 characters), or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return "Must match [A-Z_][A-Z0-9_]* (capital letters, digits and _, not starting with a digit)."
    if len(name) > NAME_MAX:
        return f"Must be at most {NAME_MAX} characters."
    return None


def _scope(owner_id: int, project_id: int | None) -> dict[str, Any]:
    """The rows of one holder: a project's secrets, or the user's own (those of no project)."""
    return {"project_id": project_id} if project_id is not None else {"owner_id": owner_id, "project__isnull": True}


def secret_set(*, owner, name: object, value: object, now: datetime, project_id: int | None = None) -> Secret:
    """Create or replace ``owner``'s secret ``name`` (or project ``project_id``'s, set by ``owner``:
    the caller has checked the role), encrypting ``value``.

    Raises:
        SecretInvalid: the name is malformed, or the value is not a string of 1 byte to 64 KiB
            (UTF-8) without NUL.
    """
    errors: dict[str, list[str]] = {}
    problem = secret_name_problem(name)
    if problem:
        errors["name"] = [problem]
    if not isinstance(value, str) or not value:
        errors["value"] = ["Must be a non-empty string."]
    elif "\x00" in value:
        errors["value"] = ["Must not contain a NUL character."]
    elif len(value.encode("utf-8", "surrogatepass")) > VALUE_MAX_BYTES:
        errors["value"] = [f"Must be at most {VALUE_MAX_BYTES // 1024} KiB."]
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            errors["value"] = ["Must be valid text (UTF-8)."]
    if errors:
        raise SecretInvalid(errors)
    token = crypto.encrypt(str(value))
    with transaction.atomic():
        # select_for_update: two replaces at once keep one row (the unique constraint backs it)
        secret = Secret.objects.select_for_update().filter(**_scope(owner.pk, project_id), name=name).first()
        if secret is None:
            return Secret.objects.create(owner=owner, project_id=project_id, name=name, token=token,
                                         created_at=now, updated_at=now)
        secret.token, secret.updated_at, secret.owner = token, now, owner
        secret.save(update_fields=["token", "updated_at", "owner"])
        return secret


def secret_delete(*, owner, name: str, project_id: int | None = None) -> bool:
    """Delete ``owner``'s secret ``name`` (project ``project_id``'s); False when there was none."""
    deleted, _ = Secret.objects.filter(**_scope(owner.pk, project_id), name=name).delete()
    return bool(deleted)


def secret_list(*, owner, project_id: int | None = None) -> list[Secret]:
    """``owner``'s own secrets (project ``project_id``'s) by name (read only ``name``, ``created_at``,
    ``updated_at``: never the value)."""
    return list(Secret.objects.filter(**_scope(owner.pk, project_id)).only("name", "created_at", "updated_at")
                .order_by("name"))


def _usable(owner_id: int, project_id: int | None):
    """The secrets a job of ``owner_id`` in ``project_id`` may use: the owner's own and the project's."""
    mine = Q(owner_id=owner_id, project__isnull=True)
    return Secret.objects.filter(mine | Q(project_id=project_id) if project_id is not None else mine)


def secret_names_known(*, owner_id: int, names: Iterable[str], project_id: int | None = None) -> set[str]:
    """Which of ``names`` a job of ``owner_id`` in project ``project_id`` may use (theirs or the project's)."""
    return set(_usable(owner_id, project_id).filter(name__in=list(names)).values_list("name", flat=True))


def secret_values(*, owner_id: int, names: Iterable[str], project_id: int | None = None) -> dict[str, str]:
    """``{name: value}`` of the secrets among ``names`` a job of ``owner_id`` in project ``project_id``
    may use: the project's, and the owner's own, which win on a name both have; one neither has is
    left out.

    For the node holding an attempt (the assignment) and the submit's checks only: a value never
    goes into a page, an API answer, an event or a log.

    Raises:
        crypto.SecretsKeyError: a value opens under no key.
    """
    wanted = sorted(set(names))
    if not wanted:
        return {}
    under = crypto.cipher()
    rows = _usable(owner_id, project_id).filter(name__in=wanted).values_list("name", "token", "project_id")
    # the project's first, then the owner's own over them
    return {name: crypto.decrypt(token, under=under) for name, token, _ in sorted(rows, key=lambda r: r[2] is None)}


def secrets_rotate(*, keys: list[bytes]) -> int:
    """Re-encrypt every secret under ``keys[0]`` (every key in ``keys`` may open the old tokens).

    Returns the number of values re-encrypted, with the tokens of other apps (:data:`.signals.key_rotating`).
    Each row is rewritten in the one transaction, so a failure leaves every row as it was.

    Raises:
        crypto.SecretsKeyError: a value opens under none of ``keys``.
    """
    under = MultiFernet([Fernet(k) for k in keys])
    count = 0
    with transaction.atomic():
        for secret in Secret.objects.select_for_update().only("pk", "token"):
            try:
                secret.token = under.rotate(bytes(secret.token))
            except Exception:  # InvalidToken; named by the message below
                raise crypto.SecretsKeyError(f"secret {secret.pk} opens under none of the keys") from None
            secret.save(update_fields=["token"])
            count += 1
        # Tokens other apps keep under the same key (webhook secrets): rewritten in the same transaction.
        try:
            count += sum(n or 0 for _, n in signals.key_rotating.send(sender=Secret, rotate=under.rotate))
        except Exception:  # InvalidToken
            raise crypto.SecretsKeyError("a stored token opens under none of the keys") from None
    return count
