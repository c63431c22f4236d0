"""``/healthz`` and ``/readyz`` (unauthenticated, cheap, saying nothing but ok or not per check) and ``/metrics``."""
from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from apps.ops.health import readiness
from apps.ops.metrics import exposition


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


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition, for ``Authorization: Bearer <E31_METRICS_TOKEN>`` only; anything else
    (no token configured, a renter's session or API token, a wrong bearer) gets 401."""
    expected = settings.E31_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if not expected or not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
        response = HttpResponse("401 Unauthorized: /metrics needs the operator's metrics token\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
