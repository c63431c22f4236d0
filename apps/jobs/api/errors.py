"""API errors: DRF's handler, with spec errors as ``{"field.path": ["message"]}``."""
from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from ..spec import SpecError


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Spec errors answer 400 with field paths; everything else as DRF does."""
    if isinstance(exc, SpecError):
        return Response(exc.errors, status=400)
    return drf_handler(exc, context)
