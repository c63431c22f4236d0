"""Fair-share usage kept incrementally, and runtime prediction from recent runs."""
from datetime import UTC, datetime, timedelta

import pytest

from apps.scheduling.usage import usage_now, usage_record

T0 = datetime(2025, 3, 1, tzinfo=UTC)
WEEK = 7 * 86400


@pytest.mark.django_db
def test_it_accumulates_usage_incrementally_with_decay(owner, settings):
    settings.E31_FAIRSHARE_HALF_LIFE_S = WEEK
    usage_record(owner_id=owner.pk, gpu_seconds=1000, runtime_s=50, now=T0)
    usage_record(owner_id=owner.pk, gpu_seconds=1000, runtime_s=70, now=T0 + timedelta(seconds=WEEK))
    usage_record(owner_id=owner.pk, gpu_seconds=0, runtime_s=90, now=T0 + timedelta(seconds=WEEK))
    row = usage_now(T0 + timedelta(seconds=2 * WEEK), [owner.pk])[owner.pk]
    assert row.decayed_gpu_seconds == pytest.approx(750.0)
    assert row.recent_runtimes_s == [70, 90]
