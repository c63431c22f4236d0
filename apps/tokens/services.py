"""Issue, list, find and revoke API tokens (:class:`ApiToken`)."""
from __future__ import annotations

import hashlib
import secrets
import unicodedata
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet

from apps.core import clock

from .models import NAME_MAX, PREFIX_LEN, ApiToken

# last_used_at is written at most once per this interval per token, so an API client polling every
# second does not write a row per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_hash(key: str) -> str:
    """SHA-256 of ``key`` (hex): what is stored and looked up."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def token_create(*, user, name: str = "", revoke_others: bool = False) -> tuple[ApiToken, str]:
    """A new API token for ``user`` named ``name``: ``(token, key)``; the key is returned this once,
    only its hash and prefix are stored.

    ``revoke_others``: the user's other tokens stop working.
    Raises ``ValidationError({"name": ...})`` where the name is not a string, is longer than ``NAME_MAX``
    characters (after trimming) or holds a control character or a lone surrogate (the database and
    the pages could not hold or show it).
    """
    if name is not None and not isinstance(name, str):
        raise ValidationError({"name": "Must be text."})
    name = (name or "").strip()
    if len(name) > NAME_MAX:
        raise ValidationError({"name": f"At most {NAME_MAX} characters."})
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        raise ValidationError({"name": "Must be printable text, with no control characters."})
    if revoke_others:
        ApiToken.objects.filter(user=user).delete()
    key = secrets.token_hex(20)
    token = ApiToken.objects.create(user=user, key_hash=token_hash(key), prefix=key[:PREFIX_LEN], name=name)
    return token, key


def token_issue(*, user, revoke_others: bool = False) -> str:
    """A new API key for ``user`` (no name): returned once. See :func:`token_create`."""
    return token_create(user=user, revoke_others=revoke_others)[1]


def token_list(*, user) -> QuerySet[ApiToken]:
    """``user``'s tokens, newest first (never the key: it is not stored)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def token_revoke(*, user, token_id: int) -> None:
    """Revoke ``user``'s token ``token_id`` at once: it stops authenticating the next request.

    Raises ``ApiToken.DoesNotExist`` where no such token is ``user``'s (another user's token is not told
    apart from none, so its existence is not given away: callers answer 404).
    """
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    if not deleted:
        raise ApiToken.DoesNotExist(f"no token {token_id} of this user")


def token_user(key: str):
    """The active user whose token ``key`` is, or None. Stamps the token's ``last_used_at``
    (at most once per ``LAST_USED_RESOLUTION``)."""
    token = ApiToken.objects.select_related("user").filter(key_hash=token_hash(key)).first()
    if token is None or not token.user.is_active:
        return None
    now = clock.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # Conditional UPDATE: two requests in the same minute write the stamp once.
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
    return token.user
