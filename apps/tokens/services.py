"""Issue, find and revoke API tokens (:class:`ApiToken`)."""
from __future__ import annotations

import hashlib
import secrets

from django.db import transaction

from .models import PREFIX_LEN, ApiToken


def token_hash(key: str) -> str:
    """SHA-256 of ``key`` (hex): what is stored and looked up."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def token_issue(*, user, revoke_others: bool = False) -> str:
    """A new API key for ``user``: returned once, only its hash and prefix are stored.

    ``revoke_others``: the user's other tokens stop working.
    """
    if revoke_others:
        ApiToken.objects.filter(user=user).delete()
    key = secrets.token_hex(20)
    ApiToken.objects.create(user=user, key_hash=token_hash(key), prefix=key[:PREFIX_LEN])
    return key


def token_user(key: str):
    """The active user whose token ``key`` is, or None."""
    token = ApiToken.objects.select_related("user").filter(key_hash=token_hash(key)).first()
    if token is None or not token.user.is_active:
        return None
    return token.user
