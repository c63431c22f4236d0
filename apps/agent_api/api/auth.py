"""Node-token authentication for the agent's calls (``Authorization: Node <token>``)."""
from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.pool.models import Node
from apps.pool.services import node_for_token


def token_from_header(header: str) -> str:
    """The token out of ``Node <token>``, or ''."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() if scheme == "Node" else ""


class NodeTokenAuthentication(authentication.BaseAuthentication):
    """Authenticates an agent; ``request.auth`` is its :class:`Node`. No user acts."""

    def authenticate(self, request) -> tuple[AnonymousUser, Node] | None:
        token = token_from_header(request.META.get("HTTP_AUTHORIZATION", ""))
        if not token:
            return None
        node = node_for_token(token)
        if node is None:
            raise exceptions.AuthenticationFailed("unknown node token")
        return AnonymousUser(), node

    def authenticate_header(self, request) -> str:
        return "Node"


class IsNode:
    """Permission: the request is authenticated by a node token."""

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, Node)

    def has_object_permission(self, request, view, obj) -> bool:
        return True


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """The node token in the OpenAPI document (security scheme ``nodeToken``)."""

    target_class = NodeTokenAuthentication
    name = "nodeToken"

    def get_security_definition(self, auto_schema) -> dict:
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Node <token>`: the node's token (`manage.py issue_node_token NODE`)."}
