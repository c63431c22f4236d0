"""Operator reports (staff): GPU-hours held, idle, down and charged, revenue, top accounts, CSV;
node down time recorded from the pool's loss check."""
import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from apps.core.choices import NodeState
from apps.metering.lease import leases_end_lost
from apps.metering.reports import operator_report
from apps.pool.models import NodeDowntime
from apps.pool.services import node_register, nodes_mark_lost

from ..drive import Agent, placed, queued_job
from ..factories import UserFactory, node_with_gpus

pytestmark = pytest.mark.django_db

DAY = datetime(2025, 5, 6, tzinfo=UTC)


def _lease(owner, clock, node, start, seconds, *, gpus=1, lost=False):
    """A job placed at ``start`` by a scheduling cycle on ``node`` (the only node), then either run
    ``seconds`` and released 6 minutes later as its agent reports it, or its node's leases ended as
    lost ``seconds`` after the start (``leases_end_lost``, the meter's half of a node loss)."""
    clock.set(start)
    job = placed(queued_job(owner, compute={"gpus": gpus, "time_limit": "10h"}))
    lease = job.leases.get()
    assert lease.node_id == node.pk
    if lost:
        leases_end_lost(node=node, at=start + timedelta(seconds=seconds))
    else:
        Agent(job, clock).run(run_s=seconds, output_s=360)
    lease.refresh_from_db()
    return lease


def test_the_report_splits_gpu_hours_per_day_and_model(frozen_clock, owner, stranger):
    node = node_with_gpus("n1", count=4, first_registered_at=DAY - timedelta(days=1))
    _lease(owner, frozen_clock, node, DAY + timedelta(hours=10), 2 * 3600, gpus=2)  # 4 GPU-h charged, 4.4 held
    _lease(stranger, frozen_clock, node, DAY + timedelta(hours=23), 2 * 3600)  # 1 h today, 1 h tomorrow
    _lease(stranger, frozen_clock, node, DAY + timedelta(hours=3), 3600, lost=True)  # held, not charged
    NodeDowntime.objects.create(node=node, down_at=DAY + timedelta(hours=4), up_at=DAY + timedelta(hours=6),
                                gpus={"H100-80GB": 4})
    report = operator_report(date(2025, 5, 6), date(2025, 5, 7), tz=UTC, now=DAY + timedelta(days=10))
    first, second = report.rows
    assert (first.day, first.gpu_model, first.gpus) == (date(2025, 5, 6), "H100-80GB", 4)
    assert first.capacity == Decimal("96.00")
    assert first.charged == Decimal("5.00")  # 4 + 1
    assert first.held == Decimal("6.20")  # 2 GPUs x 2.1 h (released 6 min after the run) + 1 h + 1 h lost
    assert first.down == Decimal("8.00")
    assert first.idle == first.capacity - first.held - first.down
    assert first.revenue == Decimal("12.45")  # 5 GPU-h x 2.49
    assert (second.charged, second.revenue) == (Decimal("1.00"), Decimal("2.49"))
    assert [(a.username, a.revenue) for a in report.top_accounts] == [("owner", Decimal("9.96")),
                                                                       ("stranger", Decimal("4.98"))]


def test_staff_see_the_report_and_its_csv_and_others_do_not(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    _lease(owner, frozen_clock, node, DAY + timedelta(hours=1), 3600)
    staff = Client()
    staff.force_login(UserFactory(username="operator", is_staff=True))
    html = staff.get("/usage/report/?from=2025-05-06&to=2025-05-06").content.decode()
    assert "Meter report" in html and "Top accounts" in html and "owner" in html
    rows = list(csv.reader(io.StringIO(staff.get("/usage/report/csv/?from=2025-05-06&to=2025-05-06")
                                       .content.decode())))
    assert rows[0][:3] == ["day", "gpu_model", "gpus"]
    assert rows[1][:2] == ["2025-05-06", "H100-80GB"] and rows[1][7] == "1.00" and rows[1][8] == "2.49"
    assert staff.get("/usage/report/csv/?from=2025-05-06&to=2025-05-01").status_code == 400
    user = Client()
    user.force_login(owner)
    assert user.get("/usage/report/").status_code == 403  # signed in, not staff
    assert Client().get("/usage/report/").status_code == 302  # to the sign-in page


def test_a_lost_node_records_its_down_time_until_it_registers_again(frozen_clock, settings):
    settings.E31_NODE_LOSS_TIMEOUT_S = 30
    node = node_with_gpus("n1", count=4)  # its last heartbeat: now
    silent_since = frozen_clock.now()
    frozen_clock.advance(minutes=5)
    assert nodes_mark_lost() == [node.pk]
    assert nodes_mark_lost() == []  # a second pass records nothing twice
    span = NodeDowntime.objects.get()
    assert span.down_at == silent_since and span.up_at is None and span.gpus == {"H100-80GB": 4}
    node.refresh_from_db()
    assert node.state == NodeState.DOWN
    inventory = {"hostname": "n1", "agent_version": "t", "cpus": 8, "memory_bytes": 1, "disk_bytes": 1,
                 "runtimes": [], "simulated": True,
                 "gpus": [{"index": i, "uuid": f"u{i}", "model": "H100-80GB", "memory_mb": 81559} for i in range(4)]}
    node_register(node=node, inventory=inventory)
    span.refresh_from_db()
    assert span.up_at == silent_since + timedelta(minutes=5)


def test_no_capacity_or_idle_hours_before_a_node_first_joined(frozen_clock):
    """A pool minutes old showed 1,952 idle GPU-hours over the days before it existed (issue 16)."""
    frozen_clock.set(DAY + timedelta(hours=18))
    node = node_with_gpus("n1", count=4, first_registered_at=None)
    node_register(node=node, inventory={"hostname": "n1.local", "agent_version": "t", "cpus": 8,
                                        "memory_bytes": 10**10, "disk_bytes": 10**11, "runtimes": [],
                                        "simulated": True, "gpus": [
                                            {"index": i, "uuid": g.uuid, "model": "H100-80GB", "memory_mb": 81559}
                                            for i, g in enumerate(node.gpus.order_by("index"))]})
    node.refresh_from_db()
    assert node.first_registered_at == DAY + timedelta(hours=18)
    before, joined = operator_report(date(2025, 5, 5), date(2025, 5, 6), tz=UTC,
                                     now=DAY + timedelta(hours=20)).rows
    assert (before.capacity, before.idle) == (Decimal("0.00"), Decimal("0.00"))
    assert (joined.capacity, joined.idle) == (Decimal("8.00"), Decimal("8.00"))  # 4 GPUs x 2 h
    frozen_clock.set(DAY + timedelta(days=3))
    node_register(node=node, inventory={"hostname": "n1.local", "agent_version": "t", "cpus": 8,
                                        "memory_bytes": 10**10, "disk_bytes": 10**11, "runtimes": [],
                                        "simulated": True, "gpus": []})
    node.refresh_from_db()
    assert node.first_registered_at == DAY + timedelta(hours=18)  # a later registration keeps the first
