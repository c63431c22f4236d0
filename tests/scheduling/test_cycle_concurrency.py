"""Two scheduling cycles at once never give one GPU twice (SPEC §5), on PostgreSQL."""
import threading

import pytest
from django.db import IntegrityError, connection, transaction

from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease, LeaseGpu
from apps.pool.models import Gpu
from apps.scheduling.adapter import schedule_cycle
from apps.scheduling.models import SchedulerCycle

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_database_refuses_a_gpu_in_two_open_leases(owner, pool, monkeypatch):
    monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)  # only our cycle runs
    job = job_submit(owner=owner, document=spec())
    schedule_cycle()
    lease = Lease.objects.get(job=job)
    held = LeaseGpu.objects.get(lease=lease)
    with pytest.raises(IntegrityError), transaction.atomic():
        LeaseGpu.objects.create(lease=lease, gpu=held.gpu)  # forged on purpose: the database refuses it


def test_concurrent_cycles_grant_each_gpu_once(owner, pool, settings, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the advisory lock is PostgreSQL's")
    monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)  # only our cycles run
    for i in range(12):
        job_submit(owner=owner, document=spec(name=f"j{i}", compute={"gpus": 1, "time_limit": "1h"}))
    barrier = threading.Barrier(4)
    errors = []

    def run():
        try:
            barrier.wait()
            schedule_cycle()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    open_gpus = list(LeaseGpu.objects.filter(open=True).values_list("gpu_id", flat=True))
    assert len(open_gpus) == len(set(open_gpus)) == Gpu.objects.count() == 6
    assert Job.objects.filter(state="rented").count() == 6
    assert Job.objects.filter(state="queued").count() == 6
    assert SchedulerCycle.objects.count() >= 1


def test_policy_settings_override_the_core_defaults_field_by_field(settings):
    from django.core.exceptions import ImproperlyConfigured

    from apps.scheduling.adapter import policy_from_settings
    from apps.scheduling.core import PolicyConfig

    settings.E31_POLICY_OVERRIDES = {}
    assert policy_from_settings().reservation_depth == PolicyConfig().reservation_depth
    settings.E31_POLICY_OVERRIDES = {"reservation_depth": "3", "backfill_by_limit": "false", "guard_after_s": "none"}
    config = policy_from_settings()
    assert (config.reservation_depth, config.backfill_by_limit, config.guard_after_s) == (3, False, None)
    settings.E31_POLICY_OVERRIDES = {"bogus": "1"}
    with pytest.raises(ImproperlyConfigured):
        policy_from_settings()
