"""Webhooks' receivers of the jobs app's signals (:mod:`apps.jobs.signals`; the jobs app never imports
this app). They run in the sender's transaction: the deliveries are written there, and their sending is
queued on the side queue after the commit (:mod:`.events`). And of the secrets app's key rotation
(:data:`apps.secrets.signals.key_rotating`): the webhooks' secrets are stored under the site's key."""
from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

from apps.jobs import signals
from apps.secrets import signals as secrets_signals

from .events import jobs_changed_record
from .models import Webhook
from .tasks import enqueue_array_checks, enqueue_deliveries

log = logging.getLogger(__name__)


def _record(job_ids: Iterable[int]) -> None:
    """Record the jobs' events; never raises, so no webhook bug fails the change that sent the signal."""
    try:
        deliveries, arrays = jobs_changed_record(job_ids)
    except Exception:
        log.exception("webhook events of jobs %s could not be recorded", list(job_ids)[:10])
        return
    if deliveries:
        transaction.on_commit(lambda: enqueue_deliveries(deliveries))
    if arrays:
        transaction.on_commit(lambda: enqueue_array_checks(arrays))


def on_job_changed(*, job_id: int, **_: object) -> None:
    """A job changed (a move, a timeline event): record its event for the webhooks that want it."""
    _record([job_id])


def on_jobs_changed(*, job_ids: list[int] | None = None, **_: object) -> None:
    """Jobs were submitted (one or a whole array): record their ``queued`` events."""
    if job_ids:
        _record(job_ids)


def on_key_rotating(*, rotate, **_: object) -> int:
    """Re-encrypt every webhook's secret under the site's new key (in the rotation's transaction);
    returns how many. Raises what ``rotate`` raises for a token no key opens."""
    count = 0
    for hook in Webhook.objects.select_for_update().only("pk", "secret_token"):
        hook.secret_token = rotate(bytes(hook.secret_token))
        hook.save(update_fields=["secret_token"])
        count += 1
    return count


def connect() -> None:
    """Connect the receivers (``HooksConfig.ready``); idempotent (``dispatch_uid``). ``job_released``
    is heard too, though each release also sends ``job_changed``: a release is never missed."""
    signals.job_changed.connect(on_job_changed, dispatch_uid="hooks.job_changed")
    signals.jobs_changed.connect(on_jobs_changed, dispatch_uid="hooks.jobs_changed")
    signals.job_released.connect(on_job_changed, dispatch_uid="hooks.job_released")
    secrets_signals.key_rotating.connect(on_key_rotating, dispatch_uid="hooks.key_rotating")
