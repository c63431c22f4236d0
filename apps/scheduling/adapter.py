"""The live side of the scheduler: read the queue and pool, run the core, apply.

:func:`schedule_cycle` is the only code that rents GPUs. Cycles never run two
at once: on PostgreSQL a transaction-scoped advisory lock, on SQLite the
IMMEDIATE transaction (one writer at a time). Even if they did, the partial
unique index ``one_open_lease_per_gpu`` refuses a GPU given twice.

Jobs and their leases are read and written through the port of :mod:`apps.scheduling.ports`
(the jobs app implements it): this module reads typed columns only, never a job's spec.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from apps.core import clock
from apps.core.choices import NodeState
from apps.core.observe import observe
from apps.core.units import GB, MIB, bytes_to_mib, mib_to_gb
from apps.pool.models import Gpu, Node
from apps.pool.notify import node_wake
from apps.projects.models import Membership, Project

from .core import (
    FairShares,
    GpuSlot,
    JobRequest,
    NodeView,
    PolicyConfig,
    held_until,
    job_request,
    predict_runtime,
    schedule,
    tree_project,
    usage_key,
)
from .core.matching import model_matches, model_trials, node_could_ever_hold, one_kind
from .core.prestage import prestage_targets
from .core.requests import Requirements
from .models import SchedulerCycle
from .node_cache import cached_inputs
from .ports import JobQueue, PositionChange, QueuedJob, job_queue
from .usage import usage_by_association, usage_now

log = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 310031  # "E31 scheduler"


LIVE_FAIRSHARE = "tree"  # issue 25 item 4: the live site shares by project, then by user (fair tree)
# Issue 25 item 4: jobs past the starvation guard go by fair share, so a project that submits more
# than its share cannot take more of a contended pool (PolicyConfig.starved_order; measured in
# docs/benchmarks-scheduler.md, "Fair share by project: the classic value and the starved order").
LIVE_STARVED_ORDER = "fairshare"


def policy_from_settings(name: str | None = None) -> PolicyConfig:
    """The policy in force: ``name`` (default ``E31_SCHEDULER_POLICY``) with the core's defaults
    (fair share by the fair tree, :data:`LIVE_FAIRSHARE`; ``E31_POLICY_FAIRSHARE=classic`` for the
    per-account classic factor; starved jobs by fair share, :data:`LIVE_STARVED_ORDER`),
    overridden field by field by ``E31_POLICY_<FIELD>`` variables (``settings.E31_POLICY_OVERRIDES``).
    The simulator reads it too, so a replay runs the settings the live site runs.

    Raises:
        ImproperlyConfigured: an override names no field of :class:`PolicyConfig` or has a bad value.
    """
    base = PolicyConfig(name=name or settings.E31_SCHEDULER_POLICY,
                        fairshare_half_life_s=settings.E31_FAIRSHARE_HALF_LIFE_S, fairshare=LIVE_FAIRSHARE,
                        starved_order=LIVE_STARVED_ORDER)
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


def pool_views(now: datetime) -> list[NodeView]:
    """Nodes not down with their present GPUs, quarantined ones left out (SPEC §5: no job is placed on
    them); a held GPU is free at its lease's time limit.

    Plain reads (no model instances, no job specs): the holds through the port (with the CPUs
    and memory, MiB, their jobs hold a node's with), GPUs and nodes as ``values_list``.
    """
    held: dict[int, tuple[float, float | None, float | None]] = {}  # GPU id -> (free_at, expected, started)
    used_cpus: dict[int, int] = defaultdict(int)
    used_mem: dict[int, int] = defaultdict(int)
    soon = now.timestamp() + 1
    leases = {}
    holds, held_gpus = job_queue().holds()
    for lease_id, hold in holds.items():
        # The replay builds its slots with the same function (one overrun rule: the core's planned_end).
        leases[lease_id] = held_until(hold.rented_at_s, hold.time_limit_s, hold.predicted_runtime_s, soon - 1)
        used_cpus[hold.node_id] += hold.cpus
        used_mem[hold.node_id] += hold.memory_mib
    for gpu_id, lease_id in held_gpus:
        held[gpu_id] = leases.get(lease_id, (soon, None, None))
    gpus: dict[int, list[GpuSlot]] = defaultdict(list)
    for gpu_id, node_id, model, memory_mib in Gpu.objects.filter(present=True, quarantined_at__isnull=True).exclude(
            node__state=NodeState.DOWN).order_by("node_id", "index").values_list("id", "node_id", "model", "memory_mb"):
        gpus[node_id].append(GpuSlot(gpu_id, model, memory_mib, *held.get(gpu_id, (0.0, None, None))))
    views = []
    for n_id, name, state, cpus, memory_bytes, runtimes in Node.objects.exclude(state=NodeState.DOWN).values_list(
            "id", "name", "state", "cpus", "memory_bytes", "runtimes"):
        memory = bytes_to_mib(memory_bytes)
        views.append(NodeView(node_id=n_id, name=name, state=state, gpus=gpus[n_id],
                              cpus_free=cpus - used_cpus[n_id], memory_free_mib=memory - used_mem[n_id],
                              cpus_total=cpus, memory_total_mib=memory, runtimes=tuple(runtimes or ())))
    return views


def _add_cache_views(views: list[NodeView], rates: dict[int, float]) -> None:
    """Fill each view's ``cached`` (what its agent last reported its cache holds) and its measured
    ``staging_rate_bps`` (bytes/s), in place: the core's cache-affinity tie-break and pre-staging read them."""
    cached = cached_inputs()
    for view in views:
        view.cached = cached.get(view.node_id, frozenset())
        view.staging_rate_bps = rates.get(view.node_id)


def pool_capacity() -> list[NodeView]:
    """Every node the pool knows, whatever its state, with its present GPUs, all free.

    What "could ever hold" is judged against: two small queries, no leases.
    """
    gpus: dict[int, list[GpuSlot]] = defaultdict(list)
    for gpu_id, node_id, model, memory_mib in Gpu.objects.filter(present=True).values_list(
            "id", "node_id", "model", "memory_mb"):  # Gpu.memory_mb is NVML's MiB
        gpus[node_id].append(GpuSlot(gpu_id, model, memory_mib))
    return [
        NodeView(node_id=n_id, name=name, state=state, gpus=gpus[n_id], cpus_total=cpus,
                 memory_total_mib=bytes_to_mib(memory), runtimes=tuple(runtimes or ()))
        for n_id, name, state, cpus, memory, runtimes in Node.objects.filter(pk__in=gpus).values_list(
            "id", "name", "state", "cpus", "memory_bytes", "runtimes")
    ]


def quarantine_views() -> list[tuple[NodeView, list[str]]]:
    """The nodes not down that have quarantined GPUs, each as a view with all its present GPUs free,
    and the words for each quarantined GPU (``"node-a GPU 0: 2 uncorrected ECC errors"``).
    One small query; empty (the usual case) when no GPU is quarantined."""
    rows = list(Gpu.objects.filter(present=True, quarantined_at__isnull=False).exclude(
        node__state=NodeState.DOWN).values_list("node_id", "node__name", "index", "quarantine_reason"))
    if not rows:
        return []
    words: dict[int, list[str]] = defaultdict(list)
    for node_id, name, index, reason in rows:
        words[node_id].append(f"{name} GPU {index}: {reason}")
    return [(v, words[v.node_id]) for v in pool_capacity() if v.node_id in words and v.state != NodeState.DOWN]


def quarantine_reason(request: JobRequest, quarantined: list[tuple[NodeView, list[str]]]) -> str | None:
    """The pending reason of a job with no likely start that a node could hold but for its quarantined
    GPUs (issue 26 item 3), e.g. "waiting for GPUs held back as unclean: node-a GPU 0: 2 uncorrected
    ECC errors"; None when no quarantined GPU would help."""
    able = [words for view, words in quarantined if node_could_ever_hold(request, view)]
    if not able:
        return None
    names = [w for ws in able for w in ws]
    shown = "; ".join(names[:3]) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")
    return f"waiting for GPUs held back as unclean (quarantined): {shown}"


def pool_refusal(request: JobRequest) -> str | None:
    """Why no node the pool knows (whatever its state) could ever hold ``request``, or None.

    The message names the largest thing the pool does have, e.g. "no node has
    16 GPUs of model H100; the most on one node is 8", "no node has GPUs of model L40S; the pool
    has A100-40GB, H100-80GB", "no GPU has 120 GB; the largest has 85.5 GB (H100-80GB)"
    (GB are 10**9 bytes: NVML's 81,559 MiB of an "80GB" card are 85.5). A gang that could be
    placed only across GPU models is :func:`gang_refusal`'s.
    """
    views = pool_capacity()
    if not views:
        return "the pool has no GPU nodes yet; ask the operator to start an agent"
    able = [v for v in views if node_could_ever_hold(request, v)]
    if len(able) >= request.nodes:
        return None
    models = " or ".join(request.gpu_models)
    if not able:
        kinds = [g for v in views for g in v.gpus
                 if not request.gpu_models or any(model_matches(m, g.model) for m in request.gpu_models)]
        if not kinds:
            return f"no node has GPUs of model {models}; the pool has {', '.join(_models(views))}"
        if request.gpu_memory_mib and all(g.memory_mib < request.gpu_memory_mib for g in kinds):
            largest = max(kinds, key=lambda g: g.memory_mib)
            return (f"no GPU{f' of model {models}' if models else ''} has {mib_to_gb(request.gpu_memory_mib):g} GB; "
                    f"the largest has {mib_to_gb(largest.memory_mib):g} GB ({largest.model})")

        def fitting(v: NodeView) -> int:
            return sum(1 for g in v.gpus if (not request.gpu_models or any(
                model_matches(m, g.model) for m in request.gpu_models)) and g.memory_mib >= request.gpu_memory_mib)
        most = max(fitting(v) for v in views)
        if most >= request.gpus_per_node:
            if request.needs_runtime and not any(v.runtimes for v in views):
                return "no node has a container runtime, so no node can run an image"
            most_cpus = max(v.cpus_total for v in views)
            most_mem = max(v.memory_total_mib for v in views) * MIB / GB
            return (f"no node has {request.gpus_per_node} such GPUs together with {request.cpus} CPUs and "
                    f"{mib_to_gb(request.memory_mib):g} GB of memory; the most on one node is {most_cpus} CPUs "
                    f"and {most_mem:.0f} GB")
        what = f"{request.gpus_per_node} GPU{'s' if request.gpus_per_node > 1 else ''}" + (
            f" of model {models}" if models else "")
        if request.gpu_memory_mib:
            what += f" with {mib_to_gb(request.gpu_memory_mib):g} GB or more each"
        return f"no node has {what}; the most on one node is {most}"
    what = f"{request.gpus_per_node} {models or 'GPUs'}"
    return (f"only {len(able)} node{'s' if len(able) > 1 else ''} can hold {what}; "
            f"the job asks for {request.nodes} such nodes")


def _models(views: list[NodeView]) -> list[str]:
    """The distinct GPU models of ``views``, by name."""
    return sorted({g.model for v in views for g in v.gpus})


def gang_refusal(request: JobRequest) -> str | None:
    """Why a gang of one kind (:func:`~.core.matching.one_kind`: more than one node, no
    ``gpu_model``, no ``mixed_models``) could never be placed: no GPU model has ``nodes`` nodes
    the pool knows (whatever their state) that could each hold a rank; None when one has, or
    for any other job. :func:`pool_refusal` is asked first (a request no node holds at all).

    E.g. "no 2 nodes of one GPU model can hold 4 GPUs each: the pool has 1 such node of
    A100-40GB and 1 of H100-80GB; set compute.mixed_models: true to let the gang mix models, or
    ask for fewer nodes".
    """
    if not one_kind(request):
        return None
    views = pool_capacity()
    counts = {t.only_model: sum(1 for v in views if node_could_ever_hold(t, v))
              for t in model_trials(request, _models(views))}
    if max(counts.values(), default=0) >= request.nodes:
        return None
    k = request.gpus_per_node
    have = sorted(((n, m) for m, n in counts.items() if n), key=lambda c: (-c[0], c[1]))
    parts = [f"{n} such node{'s' if n > 1 else ''} of {m}" if i == 0 else f"{n} of {m}"
             for i, (n, m) in enumerate(have)]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)
    return (f"no {request.nodes} nodes of one GPU model can hold {k} GPU{'s' if k > 1 else ''} each: the pool "
            f"has {listed or 'none'}; set compute.mixed_models: true to let the gang mix models, "
            "or ask for fewer nodes")


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])


ESTIMATE_SLACK_S = 60  # an estimated start moving by less than this is not a change (not written, not pushed)


def _estimate_moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(new - old) >= ESTIMATE_SLACK_S


def _write_held(queue: JobQueue, rows: list[QueuedJob], reasons: dict[int, str]) -> None:
    """Store the reason of each job held out of the plan (no place, no likely start, no bound),
    only where it changed."""
    changed = [PositionChange(r.job_id, r.owner_id, None, None, reasons[r.job_id], None) for r in rows
               if (r.queue_position, r.pending_reason, r.estimated_start_s, r.latest_start_s)
               != (None, reasons[r.job_id], None, None)]
    if changed:
        queue.write_positions(changed)


def schedule_cycle(now: datetime | None = None) -> dict[str, float | int]:
    """Run one cycle: rent GPUs to the jobs that can start, refresh every queued job's
    position, likely start, "no later than" bound and reason, writing (and pushing) only what
    changed meaningfully: a new position or reason, or a likely start or bound that moved by
    :data:`ESTIMATE_SLACK_S` or more. The likely start moves only with a cause (issue 14 item
    3): a job ended or arrived, or a run outlived its prediction (the core raises an overrun
    prediction in steps, :func:`apps.scheduling.core.planned_end`, not at every cycle).

    Returns:
        ``{"placed": n, "queued": m, "seconds": cycle time}``.
    """
    started = time.monotonic()
    frozen = now is not None  # a caller's clock (tests, the simulator) stamps as given
    with transaction.atomic():
        _lock()
        now = now or clock.now()
        queue = job_queue()
        rows = queue.queued()
        # Jobs waiting for their dependencies are not in the plan (issue 25 item 7); those that can
        # never start are released here. Read after the queue: a job submitted between the two reads
        # waits for the next cycle.
        held, gone = queue.held_back(now=now)
        if held or gone:
            _write_held(queue, [r for r in rows if r.job_id in held], held)
            rows = [r for r in rows if r.job_id not in held and r.job_id not in gone]
        if not rows:
            queue.prestage([], now=now)
            return {"placed": 0, "queued": len(held), "seconds": time.monotonic() - started}
        views = pool_views(now)
        _add_cache_views(views, queue.staging_rates())
        usage = usage_now(now)
        fair = fair_inputs(rows, now)
        requests, predicted = _requests(rows, queue, usage, fair.projects)
        policy = policy_from_settings()
        decision = schedule(requests, views, now.timestamp(), policy, usage=fair.usage,
                            promises={r.job_id: r.latest_start_s for r in rows if r.latest_start_s is not None},
                            fair=fair.shares)
        by_id = {r.job_id: r for r in rows}
        req_by_id = {r.job_id: r for r in requests}
        quarantined = quarantine_views()
        changed = []
        for pend in decision.pending:
            row = by_id[pend.job_id]
            if pend.estimated_start is None and quarantined:
                pend = dataclasses.replace(
                    pend, reason=quarantine_reason(req_by_id[pend.job_id], quarantined) or pend.reason)
            est = float(int(pend.estimated_start)) if pend.estimated_start is not None else None  # whole s
            latest = float(math.ceil(pend.latest_start)) if pend.latest_start is not None else None
            if (row.queue_position != pend.queue_position or row.pending_reason != pend.reason
                    or _estimate_moved(row.estimated_start_s, est) or _estimate_moved(row.latest_start_s, latest)):
                changed.append(PositionChange(pend.job_id, row.owner_id, pend.queue_position,
                                              None if est is None else datetime.fromtimestamp(est, UTC), pend.reason,
                                              None if latest is None else datetime.fromtimestamp(latest, UTC)))
        if changed:
            queue.write_positions(changed)  # and one push per owner after commit
        # Inputs go to the planned nodes' caches, meter off (issue 4 item 7): the reserved jobs' and
        # every job whose likely start is within its staging time (issue 14 item 5), bounded.
        plan = prestage_targets(decision, {r.job_id: r for r in requests}, views, now.timestamp(),
                                default_rate_bps=settings.E31_PRESTAGE_DEFAULT_RATE_BPS,
                                per_node=settings.E31_PRESTAGE_PER_NODE, per_cycle=settings.E31_PRESTAGE_PER_CYCLE)
        for node_id in queue.prestage(plan, now=now):
            node_wake(node_id)
        if decision.placements:
            # The meter starts when the lease exists (issue 12 item 1): the rent is the cycle's last
            # write, stamped once, by a clock read after every other write and once the lease
            # tables' locks are held (a caller's frozen clock stamps as given), so no wait is billed.
            queue.place([(p.job_id, p.nodes) for p in decision.placements], predicted_runtime_s=predicted,
                        now=now if frozen else None)
            for node_id in {n for p in decision.placements for n, _ in p.nodes}:
                node_wake(node_id)
        seconds = time.monotonic() - started
        _keep_cycle_stat(now, policy.name, seconds, len(rows), len(decision.placements))
    log.log(logging.INFO if seconds > 0.1 else logging.DEBUG, "schedule cycle: placed %d, queued %d, "
            "%d rows rewritten, %.1f ms", len(decision.placements), len(decision.pending), len(changed),
            seconds * 1000)
    return {"placed": len(decision.placements), "queued": len(decision.pending) + len(held), "seconds": seconds,
            "written": len(changed)}


class FairInputs(NamedTuple):
    """The fair tree's inputs of one cycle (:mod:`apps.scheduling.core.fairtree`)."""

    usage: dict[str, float]  # decayed GPU-seconds by usage key ("p<id>/<owner id>", or "<owner id>": personal)
    shares: FairShares  # Project.share by tree project key, Membership.share by usage key
    projects: dict[int, str]  # each queued job's project key ("p<id>"; "": the owner's personal project)


def project_key(project_id: int | None) -> str:
    """The core's project key of a team project (``p<id>``); "" for the personal one (None)."""
    return "" if project_id is None else f"p{project_id}"


def fair_inputs(rows: Sequence[QueuedJob], now: datetime) -> FairInputs:
    """Usage by association (every :class:`AccountUsage` row, decayed to ``now``), the operator's
    shares (``Project.share``, ``Membership.share``; https://slurm.schedmd.com/fair_tree.html) of
    the projects in the tree, and the project key of each queued job. A job in its owner's
    personal project counts as one with none. Three small queries."""
    by_assoc = usage_by_association(now)
    asked = {r.project_id for r in rows if r.project_id is not None} | {p for _o, p in by_assoc if p is not None}
    projects = {pid: (personal_of, share) for pid, personal_of, share in
                Project.objects.filter(pk__in=asked).values_list("id", "personal_of_id", "share")}

    def team(owner_id: int, project_id: int | None) -> int | None:
        if project_id is None or project_id not in projects or projects[project_id][0] == owner_id:
            return None
        return project_id

    keys = {r.job_id: project_key(team(r.owner_id, r.project_id)) for r in rows}
    usage: dict[str, float] = {}
    for (owner_id, project_id), value in by_assoc.items():
        key = usage_key(project_key(team(owner_id, project_id)), str(owner_id))
        usage[key] = usage.get(key, 0.0) + value
    teams = {p for p, (personal_of, _share) in projects.items() if personal_of is None}
    owners = {r.owner_id for r in rows} | {o for o, _p in by_assoc}
    project_shares = {project_key(p): projects[p][1] for p in teams}
    project_shares.update({tree_project("", str(owner)): share for owner, share in Project.objects.filter(
        personal_of_id__in=owners).values_list("personal_of_id", "share")})
    members = {usage_key(project_key(p), str(u)): share for p, u, share in Membership.objects.filter(
        project_id__in=teams).values_list("project_id", "user_id", "share")}
    return FairInputs(usage, FairShares(project_shares, members), keys)


def _requests(rows: list[QueuedJob], queue: JobQueue, usage: dict,
              projects: dict[int, str] | None = None) -> tuple[list[JobRequest], dict[int, float]]:
    """The core's requests for the queued ``rows`` (runtimes predicted per owner and time limit,
    inputs for cache affinity, the fair-share project key by job id from ``projects``), and the
    predicted runtime (s) by job id."""
    projects = projects or {}
    inputs = queue.inputs()
    runtimes: dict[tuple[int, int], float] = {}
    requests = []
    predicted: dict[int, float] = {}
    for row in rows:
        key = (row.owner_id, row.time_limit_s)
        if key not in runtimes:
            runtimes[key] = predict_runtime(
                usage[row.owner_id].recent_runtimes_s if row.owner_id in usage else [], row.time_limit_s)
        predicted[row.job_id] = runtimes[key]
        asked = inputs.get(row.job_id)
        requests.append(job_request(
            row, job_id=row.job_id, account=row.owner_id, submitted_at_s=row.submitted_at_s,
            predicted_runtime_s=runtimes[key], inputs=asked.identities if asked else (),
            input_bytes=asked.total_bytes if asked else 0, project=projects.get(row.job_id, "")))
    return requests, predicted


QUOTE_JOB_ID = 0  # the job being quoted: not saved, so no queued job has this id


def start_quotes(variants: Sequence[Requirements], *, owner_id: int, now: datetime | None = None,
                 project_id: int | None = None) -> list[tuple[datetime | None, datetime | None]]:
    """For each of ``variants`` (one job's requirements, e.g. one per GPU model it accepts): the
    likely start and the "no later than" bound the scheduler would give it if it were submitted
    now by ``owner_id`` in ``project_id`` (None: the personal project) (issue 29 item 4). Each is
    one run of the same core as the cycle (:func:`schedule`, the site's policy and the fair share of
    the owner in that project) over the queue and pool as
    the cycle reads them, plus that job; nothing is written or locked. A job that would start at
    once gets ``(now, now)``; one that could never start here ``(None, None)``.

    Jobs held back for their dependencies are planned as if queued (the cycle settles them, a
    write a quote must not make), so a quote errs late.
    """
    now = now or clock.now()
    queue = job_queue()
    rows = queue.queued()
    views = pool_views(now)
    _add_cache_views(views, queue.staging_rates())
    usage = usage_now(now)
    fair = fair_inputs([*rows, QueuedJob(QUOTE_JOB_ID, owner_id, now.timestamp(), 0, 0, 0, 0, (), 0, 0, 0, False,
                                         False, None, None, "", None, project_id)], now)
    requests, _ = _requests(rows, queue, usage, fair.projects)
    policy = policy_from_settings()
    promises = {r.job_id: r.latest_start_s for r in rows if r.latest_start_s is not None}
    out: list[tuple[datetime | None, datetime | None]] = []
    for variant in variants:
        runtime = predict_runtime(usage[owner_id].recent_runtimes_s if owner_id in usage else [],
                                  variant.time_limit_s)
        quoted = job_request(variant, job_id=QUOTE_JOB_ID, account=owner_id, submitted_at_s=now.timestamp(),
                             predicted_runtime_s=runtime, project=fair.projects[QUOTE_JOB_ID])
        decision = schedule([*requests, quoted], views, now.timestamp(), policy, usage=fair.usage,
                            promises=promises, fair=fair.shares)
        if any(p.job_id == QUOTE_JOB_ID for p in decision.placements):
            out.append((now, now))
            continue
        pend = next((p for p in decision.pending if p.job_id == QUOTE_JOB_ID), None)
        likely = pend.estimated_start if pend is not None else None
        latest = pend.latest_start if pend is not None else None
        out.append((None if likely is None else datetime.fromtimestamp(max(likely, now.timestamp()), UTC),
                    None if latest is None else datetime.fromtimestamp(math.ceil(latest), UTC)))
    return out


def _keep_cycle_stat(now: datetime, policy: str, seconds: float, queued: int, placed: int) -> None:
    """Store the cycle's figures for the admin; trim to the newest ``E31_CYCLE_STATS_KEEP``."""
    stat = SchedulerCycle.objects.create(at=now, policy=policy, seconds=seconds, queued=queued, placed=placed)
    transaction.on_commit(lambda: observe("scheduler_cycle", seconds))
    if stat.pk % 100 == 0:
        keep = settings.E31_CYCLE_STATS_KEEP
        cutoff = SchedulerCycle.objects.order_by("-pk").values_list("pk", flat=True)[keep:keep + 1].first()
        if cutoff:
            SchedulerCycle.objects.filter(pk__lte=cutoff).delete()
