"""``/healthz`` and ``/readyz``: unauthenticated, cheap, and saying nothing but ok or not per check."""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.ops.health import readiness


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the process serves requests (a liveness probe: it touches nothing else)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and storage answer and migrations are applied, else 503; the body
    names each check as ``ok`` or ``failing``, never why."""
    checks = readiness()
    ready = all(checks.values())
    body = {"status": "ok" if ready else "failing",
            "checks": {name: "ok" if passed else "failing" for name, passed in checks.items()}}
    return JsonResponse(body, status=200 if ready else 503)
