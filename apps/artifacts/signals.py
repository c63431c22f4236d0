"""Signals of the artifacts app (the house pattern: a sender here, receivers connected in ``ready()``)."""
from __future__ import annotations

from django.dispatch import Signal

# A bundle uploaded straight to the object store is joined and waits for its verification:
# ``bundle_id``, ``since`` (its ``verifying_since``, ISO 8601), ``retention_days``. Sent after
# the commit; :mod:`.tasks` queues :func:`apps.artifacts.direct.bundle_direct_verify` for it.
bundle_verify_wanted = Signal()
