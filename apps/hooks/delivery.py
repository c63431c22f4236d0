"""Sending a delivery: one try, its claim and its result (the one writer of a delivery's status).

A try first claims the row with a conditional ``UPDATE ... WHERE status = 'pending' AND next_try_at <=
now`` checked for one row, which pushes ``next_try_at`` past the try's own timeout: two workers given the
same delivery (a task delivered twice, the sweep and the first task at once) never both send it, and a
try whose worker died is due again after that lease. It then POSTs the JSON body to the address the URL's
host resolves to now (:func:`apps.hooks.guard.target`, against DNS rebinding), signed
(:mod:`apps.hooks.signing`), with httpx: TLS verified (``E31_WEBHOOK_CA_BUNDLE`` or the system's CAs),
no redirect followed, ``E31_WEBHOOK_CONNECT_TIMEOUT_S`` (5 s) to connect and ``E31_WEBHOOK_TIMEOUT_S``
(10 s) for each later wait (httpx's timeouts are per wait, not per request); the answer's body is read
until 1 KiB or that deadline from the start. A receiver that trickles its status line and headers a byte
at a time could stretch a try past it; the task's soft time limit (60 s) bounds that case. A 2xx answer
delivers it; anything else is retried ``E31_WEBHOOK_RETRY_FIRST_S`` (30 s) later, doubling up to
``E31_WEBHOOK_RETRY_MAX_S`` (1 h), until ``E31_WEBHOOK_GIVE_UP_S`` (a day) after the event, when it is
marked failed.

Each try is one task on the side queue, so a slow receiver holds one worker for at most its timeout and
never the core (scheduling cycles, the agent API) nor another webhook's tries.
"""
from __future__ import annotations

import functools
import json
import logging
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db.models import F

from apps.core import clock
from apps.secrets import crypto

from .guard import UrlRefused, target
from .models import DeliveryStatus, WebhookDelivery
from .signing import signature

log = logging.getLogger(__name__)

ANSWER_READ_MAX = 1024
USER_AGENT = "E31-Webhooks/1"


@dataclass(frozen=True)
class TryResult:
    """What one try got: ``status_code`` (None: no answer) and ``error`` (empty when 2xx)."""

    status_code: int | None
    error: str

    @property
    def delivered(self) -> bool:
        """True for a 2xx answer."""
        return self.status_code is not None and 200 <= self.status_code < 300


def body_bytes(payload: dict) -> bytes:
    """The request body of ``payload``: compact JSON, keys sorted, UTF-8 (the same bytes on every try)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")


@functools.lru_cache(maxsize=4)
def _tls(ca_bundle: str) -> ssl.SSLContext:
    """A verifying TLS context: the CA bundle at ``ca_bundle`` (a path), or the system's CAs when empty."""
    return ssl.create_default_context(cafile=ca_bundle or None)


def backoff_s(attempts: int) -> float:
    """Seconds before the next try after ``attempts`` failed ones: ``E31_WEBHOOK_RETRY_FIRST_S`` doubling
    each time, at most ``E31_WEBHOOK_RETRY_MAX_S``."""
    first, cap = settings.E31_WEBHOOK_RETRY_FIRST_S, settings.E31_WEBHOOK_RETRY_MAX_S
    return min(cap, first * 2 ** min(max(attempts - 1, 0), 30))


def _lease_s() -> float:
    """How long a claimed try holds its row: past its timeouts, so nothing else starts it meanwhile."""
    return settings.E31_WEBHOOK_CONNECT_TIMEOUT_S + settings.E31_WEBHOOK_TIMEOUT_S + 60


def send(url: str, *, secret: str, delivery_id: str, event: str, body: bytes, timestamp: int) -> TryResult:
    """POST ``body`` to ``url`` once, signed with ``secret`` at ``timestamp`` (unix seconds). Never raises
    for the network, TLS, the guard or the receiver: each is a :class:`TryResult` with its error.

    Returns within about ``E31_WEBHOOK_CONNECT_TIMEOUT_S`` plus ``E31_WEBHOOK_TIMEOUT_S`` seconds for a
    receiver that is down, silent or slow to answer: each network wait is bounded by them, and the answer
    is read until 1 KiB or the deadline (module docstring: the one case that is not).
    """
    started = time.monotonic()
    total = settings.E31_WEBHOOK_TIMEOUT_S
    try:
        where = target(url)
    except UrlRefused as exc:
        return TryResult(None, f"refused: {exc}"[:300])
    headers = {"Host": where.host_header, "Content-Type": "application/json", "User-Agent": USER_AGENT,
               "E31-Webhook-Id": delivery_id, "E31-Webhook-Event": event,
               "E31-Webhook-Timestamp": str(timestamp), "E31-Webhook-Signature": signature(secret, timestamp, body)}
    extensions = {"sni_hostname": where.sni} if where.sni else {}
    timeout = httpx.Timeout(total, connect=settings.E31_WEBHOOK_CONNECT_TIMEOUT_S)
    try:
        with httpx.Client(verify=_tls(settings.E31_WEBHOOK_CA_BUNDLE), timeout=timeout, follow_redirects=False,
                          trust_env=False) as client:
            request = client.build_request("POST", where.url, content=body, headers=headers, extensions=extensions)
            response = client.send(request, stream=True)
            try:
                read = 0
                for chunk in response.iter_raw():
                    read += len(chunk)
                    if read >= ANSWER_READ_MAX or time.monotonic() - started > total:
                        break
            finally:
                response.close()
    except httpx.TimeoutException as exc:
        return TryResult(None, f"timed out ({type(exc).__name__}) after {time.monotonic() - started:.1f} s")
    except (httpx.HTTPError, ssl.SSLError, OSError, ValueError) as exc:
        return TryResult(None, f"{type(exc).__name__}: {exc}"[:300])
    code = response.status_code
    return TryResult(code, "" if 200 <= code < 300 else f"answered {code}")


def _claim(delivery_id: int, now: datetime) -> bool:
    """Take the try of delivery ``delivery_id`` when it is due (module docstring); True when taken."""
    return WebhookDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING, next_try_at__lte=now).update(
        attempts=F("attempts") + 1, next_try_at=now + timedelta(seconds=_lease_s())) == 1


def _finish(d: WebhookDelivery, result: TryResult, now: datetime) -> str:
    """Write the result of try ``d.attempts``; returns the delivery's status after it."""
    fields: dict[str, object] = {"last_status_code": result.status_code, "last_error": result.error[:300]}
    if result.delivered:
        fields.update(status=DeliveryStatus.DELIVERED, delivered_at=now, next_try_at=None)
    else:
        retry_at = now + timedelta(seconds=backoff_s(d.attempts))
        if retry_at > d.created_at + timedelta(seconds=settings.E31_WEBHOOK_GIVE_UP_S):
            fields.update(status=DeliveryStatus.FAILED, next_try_at=None)
        else:
            fields.update(next_try_at=retry_at)
    # A webhook deleted meanwhile took the row with it: nothing is written.
    WebhookDelivery.objects.filter(pk=d.pk, status=DeliveryStatus.PENDING).update(**fields)
    return str(fields.get("status", DeliveryStatus.PENDING))


def delivery_try(delivery_id: int) -> str | None:
    """One try of delivery ``delivery_id`` if it is due and nobody else tries it: claimed, sent
    (:func:`send`), its result written. Returns the status after the try (``delivered``, ``pending``
    for a retry, ``failed`` once given up), or None when there was nothing to try (done, not due, taken
    by another worker, deleted). Never raises for the receiver; returns within :func:`send`'s bound."""
    now = clock.now()
    if not _claim(delivery_id, now):
        return None
    d = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if d is None:
        return None
    if not d.webhook.active:
        result = TryResult(None, "the webhook is turned off")
        WebhookDelivery.objects.filter(pk=d.pk).update(status=DeliveryStatus.FAILED, next_try_at=None,
                                                       last_error=result.error)
        return DeliveryStatus.FAILED
    try:
        secret = crypto.decrypt(d.webhook.secret_token)
    except crypto.SecretsKeyError as exc:
        result = TryResult(None, f"not signed: {exc}")
    else:
        result = send(d.webhook.url, secret=secret, delivery_id=str(d.delivery_id), event=d.event,
                      body=body_bytes(d.payload), timestamp=int(now.timestamp()))
    status = _finish(d, result, clock.now())
    log.info("webhook %s delivery %s (%s) try %s: %s", d.webhook_id, d.delivery_id, d.event, d.attempts,
             result.status_code or result.error)
    return status


def deliveries_due(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Ids of the pending deliveries due at ``now`` (their first try lost, or a retry), soonest first."""
    return list(WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_try_at__lte=now or clock.now())
                .order_by("next_try_at", "pk").values_list("pk", flat=True)[:limit])
