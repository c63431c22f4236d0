"""Issue 14 item 1: one scheduler. A small trace replayed through the live path (PostgreSQL, jobs
submitted through the services, cycles driven with a frozen clock, runs started and ended by agent
reports) and through the simulator gives every job the same start time."""
from __future__ import annotations

import heapq
import random
import time
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from apps.agent_api.reports import agent_report
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease
from apps.scheduling.adapter import policy_from_settings, schedule_cycle
from apps.scheduling.core import GpuSlot, JobRequest, NodeView
from apps.scheduling.models import AccountUsage
from apps.scheduling.simulator import ReplayJob, replay_jobs

from ..factories import UserFactory, node_with_gpus

NODES, GPUS = 3, 4


def small_trace(seed: int, n: int = 36) -> list[tuple[int, int, int, int, int, int]]:
    """``(submit s, account index, GPUs per node, nodes, limit s, run s)`` in submit order: bursts,
    a few 0 s runs, runs that outlive their account's prediction, gangs of 2 and 3 nodes."""
    rng = random.Random(seed)
    out, t = [], 0
    for _ in range(n):
        t += rng.choice((0, 0, 5, 20, 60, 200))
        limit = rng.choice((60, 300, 900))
        run = rng.choice((0, limit // 10, limit // 3, limit // 2, limit))
        nodes = rng.choice((1, 1, 1, 1, 2, 3))
        gpus = rng.choice((1, 2, 4)) if nodes == 1 else GPUS
        out.append((t, rng.randrange(3), gpus, nodes, limit, run))
    return out


class Live:
    """Drives the live site: a frozen clock, the services, the cycle and the agents' reports."""

    def __init__(self, monkeypatch, base: float):
        self.base = base
        self.now = base
        monkeypatch.setattr(timezone, "now", lambda: datetime.fromtimestamp(self.now, UTC))
        monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)  # cycles run only here
        self.seq: dict[int, int] = {}

    def at(self, t: float) -> datetime:
        self.now = self.base + t
        return datetime.fromtimestamp(self.now, UTC)

    def say(self, lease: Lease, type_: str, **extra) -> None:
        self.seq[lease.pk] = self.seq.get(lease.pk, 0) + 1
        assert agent_report(node=lease.node, job_id=lease.job_id, now=timezone.now(),
                            report={"attempt": lease.attempt, "seq": self.seq[lease.pk], "type": type_, **extra})


def run_live(trace, owners, monkeypatch) -> tuple[dict[int, float], list[int]]:
    """Replay ``trace`` through the live site; ``({job id: start s from the base}, job ids in trace order)``."""
    live = Live(monkeypatch, float(int(time.time())))
    ids: list[int] = []
    run_of: dict[int, int] = {}
    starts: dict[int, float] = {}
    ending: list[tuple[float, int]] = []
    i = 0
    while i < len(trace) or ending:
        t = min(trace[i][0] if i < len(trace) else float("inf"), ending[0][0] if ending else float("inf"))
        now = live.at(t)
        while ending and ending[0][0] <= t:  # completions first: each rank exits, then finishes
            _end, job_id = heapq.heappop(ending)
            leases = list(Lease.objects.filter(job_id=job_id).select_related("node").order_by("node_rank"))
            for lease in leases:
                live.say(lease, "exited", reason="exit", exit_code=0)
            for lease in leases:
                live.say(lease, "finished")
            assert Job.objects.get(pk=job_id).state == "released"
        while i < len(trace) and trace[i][0] <= t:  # then arrivals
            _t, who, gpus, nodes, limit, run = trace[i]
            job = job_submit(owner=owners[who], document={
                "name": f"t{i}", "work": {"command": "true", "kind": "other"},
                "compute": {"gpus": gpus, "nodes": nodes, "time_limit": limit}})
            ids.append(job.pk)
            run_of[job.pk] = run
            i += 1
        if Job.objects.filter(state="queued").exists():
            schedule_cycle(now=now)  # then one cycle
            for lease in Lease.objects.filter(rented_at=now, node_rank=0).exclude(job_id__in=starts).select_related(
                    "node"):
                starts[lease.job_id] = t
                live.say(lease, "running")
                heapq.heappush(ending, (t + run_of[lease.job_id], lease.job_id))
        if i >= len(trace) and not ending:
            break
    return starts, ids


@pytest.mark.django_db
@pytest.mark.parametrize("policy", ["e31", "easy"])
@pytest.mark.parametrize("seed", [14, 41])
def test_live_cycles_and_the_replay_start_every_job_at_the_same_time(policy, seed, settings, monkeypatch):
    settings.E31_SCHEDULER_POLICY = policy
    settings.E31_FAIRSHARE_HALF_LIFE_S = 600.0  # short, so that usage decays within the trace
    owners = [UserFactory(username=f"acct{k}") for k in range(3)]
    nodes = [node_with_gpus(f"sim{k:04d}", count=GPUS, model="H100-80GB", memory_mb=81559, cpus=64)
             for k in range(1, NODES + 1)]
    trace = small_trace(seed)
    live_starts, ids = run_live(trace, owners, monkeypatch)
    assert len(live_starts) == len(trace)
    assert AccountUsage.objects.count() == len({who for _t, who, *_ in trace})  # the live ledger was fed

    views = [NodeView(n.pk, n.name, "up", [GpuSlot(g.pk, g.model, g.memory_mb) for g in n.gpus.order_by("index")],
                      cpus_free=64, memory_free_mib=10**6, cpus_total=64, memory_total_mib=10**6) for n in nodes]
    jobs = [ReplayJob(JobRequest(job_id=ids[k], account=str(owners[who].pk), submitted_at=float(t),
                                 gpus_per_node=gpus, nodes=count, time_limit_s=limit), float(run))
            for k, (t, who, gpus, count, limit, run) in enumerate(trace)]
    replayed = replay_jobs(jobs, views, policy_from_settings(policy))
    assert replayed.started == live_starts
    # the trace is not trivial: some jobs waited, and not in submit order
    waits = {ids[k]: live_starts[ids[k]] - trace[k][0] for k in range(len(trace))}
    assert sum(1 for w in waits.values() if w > 0) >= 5
