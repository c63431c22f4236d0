"""``Authorization: Token <key>`` against hashed keys (:mod:`apps.tokens.models`)."""
from __future__ import annotations

from rest_framework import authentication, exceptions

from .services import token_user


class HashedTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token scheme (same header, same 401 with ``WWW-Authenticate: Token``), keys stored hashed."""

    def authenticate_credentials(self, key: str):
        user = token_user(key)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return user, None
