"""The live side of the scheduler: read the queue and pool, run the core, apply.

:func:`schedule_cycle` is the only code that rents GPUs. Cycles never run two
at once: on PostgreSQL a transaction-scoped advisory lock, on SQLite the
IMMEDIATE transaction (one writer at a time). Even if they did, the partial
unique index ``one_open_lease_per_gpu`` refuses a GPU given twice.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import FloatField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.jobs.choices import JobState
from apps.jobs.models import Job, JobEvent
from apps.jobs.prestage import prestage_plan
from apps.jobs.state import transition
from apps.live.push import queue_changed
from apps.metering.models import Lease, LeaseGpu, SchedulerCycle
from apps.metering.services import lease_open
from apps.metering.usage import usage_now

from .choices import NodeState
from .models import Gpu, Node
from .notify import node_wake
from .scheduler import GpuSlot, JobRequest, NodeView, PolicyConfig, predict_runtime, schedule
from .scheduler.matching import model_matches, node_could_ever_hold

log = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 310031  # "E31 scheduler"
GB = 1_000_000_000


def job_request(job: Job, predicted_runtime_s: float | None = None) -> JobRequest:
    """The scheduler's view of a job (SPEC §2 compute part, in MB and bytes)."""
    return _request(job.pk, job.owner_id, job.submitted_at.timestamp(), job.gpus_per_node, job.nodes, job.time_limit_s,
                    job.priority_boost, job.spec["compute"], job.spec["work"].get("image"), predicted_runtime_s)


def _request(job_id: int, owner_id: int, submitted_at: float, gpus_per_node: int, nodes: int,
             time_limit_s: int, priority_boost: int, compute: dict[str, Any] | None, image: Any,
             predicted_runtime_s: float | None) -> JobRequest:
    compute = compute or {}
    return JobRequest(
        job_id=job_id, account=str(owner_id), submitted_at=submitted_at,
        gpus_per_node=gpus_per_node, nodes=nodes, time_limit_s=time_limit_s,
        gpu_models=tuple(compute.get("gpu_model") or ()),
        gpu_memory_mb=int((compute.get("gpu_memory_gb") or 0) * 1000),
        cpus=compute.get("cpus") or 0,
        memory_bytes=int((compute.get("memory_gb") or 0) * GB),
        needs_runtime=bool(image),
        priority_boost=priority_boost,
        predicted_runtime_s=predicted_runtime_s,
    )


def policy_config(name: str | None = None) -> PolicyConfig:
    """The policy in force: ``name`` (default ``E31_SCHEDULER_POLICY``) with the core's defaults,
    overridden field by field by ``E31_POLICY_<FIELD>`` variables (``settings.E31_POLICY_OVERRIDES``).
    The simulator reads it too, so a replay runs the settings the live site runs.

    Raises:
        ImproperlyConfigured: an override names no field of :class:`PolicyConfig` or has a bad value.
    """
    base = PolicyConfig(name=name or settings.E31_SCHEDULER_POLICY,
                        fairshare_half_life_s=settings.E31_FAIRSHARE_HALF_LIFE_S)
    fields = {f.name: f for f in dataclasses.fields(PolicyConfig)}
    changes = {}
    for key, raw in settings.E31_POLICY_OVERRIDES.items():
        if key not in fields or key == "name":
            raise ImproperlyConfigured(f"E31_POLICY_{key.upper()}: no such scheduling policy setting")
        current = getattr(base, key)
        try:
            if isinstance(current, bool):
                value = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(current, str):
                value = raw
            elif isinstance(current, int):
                value = int(raw)
            else:
                value = None if raw.strip().lower() in ("", "none") else float(raw)
        except ValueError:
            raise ImproperlyConfigured(f"E31_POLICY_{key.upper()}={raw!r} is not a valid value") from None
        changes[key] = value
    return dataclasses.replace(base, **changes)


def expected_end(lease: Lease) -> float | None:
    """When the lease's run should end by its prediction (epoch s), or None without one.

    The core repairs it when the run outlives it (:func:`apps.pool.scheduler.planned_end`).
    """
    if lease.predicted_runtime_s is None:
        return None
    return lease.rented_at.timestamp() + lease.predicted_runtime_s


def pool_views(now: datetime) -> list[NodeView]:
    """Nodes not down with their present GPUs; a held GPU is free at its lease's time limit.

    Plain ``values_list`` reads (no model instances, no job specs: only the two compute
    fields a running job holds a node's CPUs and memory with).
    """
    held: dict[int, float] = {}
    expected: dict[int, float | None] = {}
    used_cpus: dict[int, int] = defaultdict(int)
    used_mem: dict[int, int] = defaultdict(int)
    soon = now.timestamp() + 1
    leases = {}
    for lease_id, node_id, rented_at, limit, predicted, cpus, memory_gb in Lease.objects.filter(
            lease_gpus__open=True).distinct().values_list(
            "id", "node_id", "rented_at", "time_limit_s", "predicted_runtime_s",
            "job__spec__compute__cpus", "job__spec__compute__memory_gb"):
        start = rented_at.timestamp()
        # A job past its limit but not yet released still holds the GPU: it
        # frees "any moment now", never in the past.
        leases[lease_id] = (max(start + limit, soon), None if predicted is None else start + predicted)
        used_cpus[node_id] += cpus or 0
        used_mem[node_id] += int((memory_gb or 0) * GB)
    for gpu_id, lease_id in LeaseGpu.objects.filter(open=True).values_list("gpu_id", "lease_id"):
        held[gpu_id], expected[gpu_id] = leases.get(lease_id, (soon, None))
    gpus: dict[int, list[GpuSlot]] = defaultdict(list)
    for gpu_id, node_id, model, memory_mb in Gpu.objects.filter(present=True).exclude(
            node__state=NodeState.DOWN).order_by("node_id", "index").values_list("id", "node_id", "model", "memory_mb"):
        gpus[node_id].append(GpuSlot(gpu_id, model, memory_mb, held.get(gpu_id, 0.0), expected.get(gpu_id)))
    return [
        NodeView(node_id=n_id, name=name, state=state, gpus=gpus[n_id],
                 cpus_free=cpus - used_cpus[n_id], memory_free_bytes=memory - used_mem[n_id],
                 cpus_total=cpus, memory_total_bytes=memory, runtimes=tuple(runtimes or ()))
        for n_id, name, state, cpus, memory, runtimes in Node.objects.exclude(state=NodeState.DOWN).values_list(
            "id", "name", "state", "cpus", "memory_bytes", "runtimes")
    ]


def pool_capacity() -> list[NodeView]:
    """Every node the pool knows, whatever its state, with its present GPUs, all free.

    What "could ever hold" is judged against: two small queries, no leases.
    """
    gpus: dict[int, list[GpuSlot]] = defaultdict(list)
    for gpu_id, node_id, model, memory_mb in Gpu.objects.filter(present=True).values_list(
            "id", "node_id", "model", "memory_mb"):
        gpus[node_id].append(GpuSlot(gpu_id, model, memory_mb))
    return [
        NodeView(node_id=n_id, name=name, state=state, gpus=gpus[n_id], cpus_total=cpus,
                 memory_total_bytes=memory, runtimes=tuple(runtimes or ()))
        for n_id, name, state, cpus, memory, runtimes in Node.objects.filter(pk__in=gpus).values_list(
            "id", "name", "state", "cpus", "memory_bytes", "runtimes")
    ]


def pool_refusal(request: JobRequest) -> str | None:
    """Why no node the pool knows (whatever its state) could ever hold ``request``, or None.

    The message names the largest thing the pool does have, e.g. "no node has
    16 GPUs of model H100; the most on one node is 8".
    """
    views = pool_capacity()
    if not views:
        return "the pool has no GPU nodes yet; ask the operator to start an agent"
    able = [v for v in views if node_could_ever_hold(request, v)]
    if len(able) >= request.nodes:
        return None
    models = " or ".join(request.gpu_models)
    if not able:
        def fitting(v: NodeView) -> int:
            return sum(1 for g in v.gpus if (not request.gpu_models or any(
                model_matches(m, g.model) for m in request.gpu_models)) and g.memory_mb >= request.gpu_memory_mb)
        most = max(fitting(v) for v in views)
        if most >= request.gpus_per_node:
            if request.needs_runtime and not any(v.runtimes for v in views):
                return "no node has a container runtime, so no node can run an image"
            most_cpus = max(v.cpus_total for v in views)
            most_mem = max(v.memory_total_bytes for v in views) / GB
            return (f"no node has {request.gpus_per_node} such GPUs together with {request.cpus} CPUs and "
                    f"{request.memory_bytes / GB:g} GB of memory; the most on one node is {most_cpus} CPUs "
                    f"and {most_mem:.0f} GB")
        what = f"{request.gpus_per_node} GPU{'s' if request.gpus_per_node > 1 else ''}" + (
            f" of model {models}" if models else "")
        if request.gpu_memory_mb:
            what += f" with {request.gpu_memory_mb / 1000:g} GB or more each"
        return f"no node has {what}; the most on one node is {most}"
    what = f"{request.gpus_per_node} {models or 'GPUs'}"
    return (f"only {len(able)} node{'s' if len(able) > 1 else ''} can hold {what}; "
            f"the job asks for {request.nodes} such nodes")


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])


ESTIMATE_SLACK_S = 60  # an estimated start moving by less than this is not a change (not written, not pushed)
QUEUE_COLUMNS = ("id", "owner_id", "submitted_at", "gpus_per_node", "nodes", "time_limit_s", "priority_boost",
                 "spec__compute", "spec__work__image", "queue_position", "estimated_start_at", "pending_reason")


def _epoch(column: str) -> RawSQL:
    return RawSQL(f"EXTRACT(EPOCH FROM {connection.ops.quote_name(column)})::float8", [],
                  output_field=FloatField())


def _queued_rows() -> list[tuple]:
    """The queue in submit order as plain tuples (:data:`QUEUE_COLUMNS`, times as epoch seconds):
    no model instances, and of each spec only its compute part and whether it names an image."""
    queued = Job.objects.filter(state=JobState.QUEUED).order_by("submitted_at", "id")
    if connection.vendor == "postgresql":  # epoch floats: no timestamp parsing per row
        cols = list(QUEUE_COLUMNS)
        cols[2], cols[10] = "submitted_s", "estimated_s"
        return list(queued.annotate(submitted_s=_epoch("submitted_at"), estimated_s=_epoch("estimated_start_at"))
                    .values_list(*cols))
    return [(*r[:2], r[2].timestamp(), *r[3:10], r[10].timestamp() if r[10] else None, r[11])
            for r in queued.values_list(*QUEUE_COLUMNS)]


def _estimate_moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(new - old) >= ESTIMATE_SLACK_S


def schedule_cycle(now: datetime | None = None) -> dict[str, float | int]:
    """Run one cycle: rent GPUs to the jobs that can start, refresh every queued job's
    position, estimate and reason, writing (and pushing) only what changed meaningfully:
    a new position or reason, or an estimated start that moved by :data:`ESTIMATE_SLACK_S`
    or more (the estimates of a queue behind an overrunning job drift every cycle; they
    are written once a minute, not every cycle).

    Returns:
        ``{"placed": n, "queued": m, "seconds": cycle time}``.
    """
    started = time.monotonic()
    frozen = now is not None  # a caller's clock (tests, the simulator) stamps as given
    with transaction.atomic():
        _lock()
        now = now or timezone.now()
        rows = _queued_rows()
        if not rows:
            prestage_plan([], now=now)
            return {"placed": 0, "queued": 0, "seconds": time.monotonic() - started}
        views = pool_views(now)
        usage = usage_now(now)
        runtimes: dict[tuple[int, int], float] = {}
        requests = []
        predicted: dict[int, float] = {}
        for job_id, owner_id, submitted_at, gpn, nodes, limit, boost, compute, image, *_ in rows:
            key = (owner_id, limit)
            if key not in runtimes:
                runtimes[key] = predict_runtime(usage[owner_id].recent_runtimes_s if owner_id in usage else [],
                                                limit)
            predicted[job_id] = runtimes[key]
            requests.append(_request(job_id, owner_id, submitted_at, gpn, nodes, limit, boost, compute, image,
                                     runtimes[key]))
        policy = policy_config()
        decision = schedule(requests, views, now.timestamp(), policy,
                            usage={str(o): u.decayed_gpu_seconds for o, u in usage.items()})
        _place(decision.placements, predicted, now)
        by_id = {r[0]: r for r in rows}
        changed = []
        for pend in decision.pending:
            row = by_id[pend.job_id]
            position, old_est, reason = row[-3:]
            est = float(int(pend.estimated_start)) if pend.estimated_start is not None else None  # whole s
            if position != pend.queue_position or reason != pend.reason or _estimate_moved(old_est, est):
                changed.append((pend.job_id, row[1], pend.queue_position,
                                None if est is None else datetime.fromtimestamp(est, UTC), pend.reason))
        if changed:
            _write_queue(changed)
            queue_changed((owner, job_id) for job_id, owner, *_ in changed)  # after commit: one message per owner
        # Reserved jobs' inputs go to their planned nodes' caches now, meter off (issue 4, item 7).
        for node_id in prestage_plan([(r.job_id, [n for n, _ in r.nodes]) for r in decision.reservations], now=now):
            node_wake(node_id)
        seconds = time.monotonic() - started
        _keep_cycle_stat(now, policy.name, seconds, len(rows), len(decision.placements))
        if decision.placements and not frozen:
            # The meter starts when the lease exists (issue 12 item 1): every wait inside this
            # cycle (a lock on the lease table, a slow write) is over; stamp the rent now, just
            # before the commit, so none of it is billed.
            _restamp_rent([p.job_id for p in decision.placements], now, timezone.now())
    log.log(logging.INFO if seconds > 0.1 else logging.DEBUG, "schedule cycle: placed %d, queued %d, "
            "%d rows rewritten, %.1f ms", len(decision.placements), len(decision.pending), len(changed),
            seconds * 1000)
    return {"placed": len(decision.placements), "queued": len(decision.pending), "seconds": seconds,
            "written": len(changed)}


def _place(placements, predicted: dict[int, float], now: datetime) -> None:
    """Open the leases of the placed jobs and move them to rented (model instances for these only)."""
    if not placements:
        return
    jobs = Job.objects.in_bulk([p.job_id for p in placements])
    gpus = Gpu.objects.in_bulk([g for p in placements for _, ids in p.nodes for g in ids])
    nodes = Node.objects.in_bulk([n for p in placements for n, _ in p.nodes])
    for placement in placements:
        job = jobs[placement.job_id]
        for rank, (node_id, gpu_ids) in enumerate(placement.nodes):
            lease_open(job=job, node=nodes[node_id], gpus=[gpus[g] for g in gpu_ids],
                       node_rank=rank, now=now, predicted_runtime_s=predicted[job.pk])
            node_wake(node_id)
        where = ", ".join(f"{nodes[n].name} ({len(ids)} GPU{'s' if len(ids) > 1 else ''})"
                          for n, ids in placement.nodes)
        transition(job, JobState.RENTED, detail=f"rented {where}", now=now)


def _restamp_rent(job_ids: list[int], stamped: datetime, at: datetime) -> None:
    """Move the rent of the jobs this cycle placed from ``stamped`` (the cycle's clock read once it
    held its lock) to ``at`` (read after the cycle's writes, just before commit): the leases'
    ``rented_at`` (the meter's start and the agents' deadline basis, SPEC §4), the jobs'
    ``rented_at`` and their "rented" events. Three UPDATEs, whatever the number of jobs."""
    if at <= stamped:
        return
    Lease.objects.filter(job_id__in=job_ids, rented_at=stamped, released_at__isnull=True).update(rented_at=at)
    Job.objects.filter(pk__in=job_ids, state=JobState.RENTED, rented_at=stamped).update(rented_at=at)
    JobEvent.objects.filter(job_id__in=job_ids, to_state=JobState.RENTED, at=stamped).update(at=at)


def _write_queue(changed: list[tuple[int, int, int, datetime | None, str]]) -> None:
    """Store ``(job_id, owner_id, position, estimated_start_at, reason)`` rows: on PostgreSQL one
    ``UPDATE ... FROM unnest(...)``; elsewhere ``bulk_update``. Only rows still queued are touched."""
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(Job._meta.db_table)
        with connection.cursor() as cur:
            cur.execute(
                f"UPDATE {table} AS j SET queue_position = v.pos, estimated_start_at = v.est, "
                "pending_reason = v.reason FROM unnest(%s::bigint[], %s::integer[], %s::timestamptz[], %s::text[]) "
                "AS v(id, pos, est, reason) WHERE j.id = v.id AND j.state = %s",
                [[c[0] for c in changed], [c[2] for c in changed], [c[3] for c in changed],
                 [c[4] for c in changed], JobState.QUEUED])
        return
    jobs = [Job(pk=job_id, queue_position=pos, estimated_start_at=est, pending_reason=reason)
            for job_id, _, pos, est, reason in changed]
    Job.objects.bulk_update(jobs, ["queue_position", "estimated_start_at", "pending_reason"], batch_size=500)


def _keep_cycle_stat(now: datetime, policy: str, seconds: float, queued: int, placed: int) -> None:
    """Store the cycle's figures for the admin; trim to the newest ``E31_CYCLE_STATS_KEEP``."""
    stat = SchedulerCycle.objects.create(at=now, policy=policy, seconds=seconds, queued=queued, placed=placed)
    if stat.pk % 100 == 0:
        keep = settings.E31_CYCLE_STATS_KEEP
        cutoff = SchedulerCycle.objects.order_by("-pk").values_list("pk", flat=True)[keep:keep + 1].first()
        if cutoff:
            SchedulerCycle.objects.filter(pk__lte=cutoff).delete()
