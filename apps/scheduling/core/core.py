"""One scheduling cycle: which queued jobs start now, and what every other one should expect.

Three policies, chosen by name (setting ``E31_SCHEDULER_POLICY``):

``fifo``
    First come first served (operator boost, then submit time, then id);
    the first job that cannot start blocks the ones behind it.
``easy``
    EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", JSSPP
    1995; Mu'alem and Feitelson, IEEE TPDS 12(6), 2001): FIFO order; the
    first job that cannot start (the head) gets a reservation at its shadow
    time, computed from the *time limits* of what runs; a later job may
    start now if it fits now and, by its time limit, delays no GPU the
    reservation needs (it ends before the shadow time or uses extra GPUs).
``e31`` (ours)
    EASY++ (Tsafrir, Etsion and Feitelson, IEEE TPDS 18(6), 2007) with
    fair share: the queue is ordered by multifactor priority (age, fair
    share, slowdown so far, job size, operator boost; see :mod:`.priority`); the top
    ``reservation_depth`` jobs that cannot start get reservations planned
    with *predicted* run times; the jobs left are then tried in priority order
    (``backfill_order``; ``shortest``: shortest predicted run first, SJBF), and one starts
    now only if, by its declared time limit, it delays no reservation (SPEC §5). With
    ``backfill_by_limit`` off, backfill is judged by predictions too (EASY++
    proper); then a head that has waited ``starvation_s`` is also *guarded*
    as in EASY: its start in the plan by time limits is held too, so jobs
    outliving their predictions cannot push it past the start EASY would
    give it. The plan is rebuilt every cycle, so a job that outlives its
    prediction only moves the plan.

Placement is gang (all GPUs of all ranks, or nothing), best fit, on nodes
that are up (see :mod:`.pool`); a gang that names no GPU model goes on GPUs of one
model unless it asks for ``mixed_models`` (:func:`~.matching.one_kind`). Every job not started gets a queue
position (1 = next), an estimated start (epoch s, >= now; None if no set of
up nodes can ever hold it) and a reason in plain words, and a bound, "no
later than" (issue 14 item 3): its start in the plan by time limits, in which
what runs ends at its limit and every job ahead of it in the queue's order
holds its whole limit from its own earliest start, none before a job ahead of
it (list scheduling, no job filling a gap before it: Slurm's ``squeue --start``). Under ``fifo``
and ``easy`` it holds while no job is put ahead of this one and the reservations made hold;
never earlier than the estimated start. Under ``e31`` (``keep_bounds``, the default) the plan
is in submit order and a bound once given is a promise the cycle keeps (:meth:`_Cycle.promise`):
no job starts now that would put a promised job past its promise in that plan, and the
likely start is never after the bound. It is broken only by what the plan cannot see (a node
lost or drained, a run not ended at its limit).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from apps.core.units import mib_to_gb

from .estimates import EstimateWalk
from .fairtree import job_usage_key
from .matching import describe_request, one_kind
from .pool import Pool, Unit, shape_of
from .priority import order_fifo, order_multifactor
from .types import Decision, FairShares, JobRequest, NodeView, Pending, Placement, PolicyConfig, Reservation

POLICIES = ("fifo", "easy", "e31")
FAIRSHARE_MODES = ("classic", "tree")  # PolicyConfig.fairshare
STARVED_ORDERS = ("fifo", "widest", "fairshare")  # PolicyConfig.starved_order


def policy_resolve(policy: str | PolicyConfig) -> PolicyConfig:
    """The config for ``policy`` (a name means the defaults); ``easy`` always has depth 1.

    Raises:
        ValueError: unknown policy, fair-share mode or starved order.
    """
    config = PolicyConfig(name=policy) if isinstance(policy, str) else policy
    if config.name not in POLICIES:
        raise ValueError(f"unknown scheduling policy {config.name!r}; known: {', '.join(POLICIES)}")
    if config.fairshare not in FAIRSHARE_MODES:
        raise ValueError(f"unknown fair share {config.fairshare!r}; known: {', '.join(FAIRSHARE_MODES)}")
    if config.starved_order not in STARVED_ORDERS:
        raise ValueError(f"unknown starved order {config.starved_order!r}; known: {', '.join(STARVED_ORDERS)}")
    return config


def schedule(queue: Sequence[JobRequest], nodes: Sequence[NodeView], now: float,
             policy: str | PolicyConfig = "fifo", usage: Mapping[str, float] | None = None,
             promises: Mapping[int, float] | None = None, fair: FairShares | None = None) -> Decision:
    """Decide which queued jobs start now and what the others should expect.

    Args:
        queue: every queued job, in any order.
        nodes: every node with its GPUs; a GPU's ``free_at`` > ``now`` is held.
        now: the clock, seconds since the epoch.
        policy: ``fifo``, ``easy``, ``e31``, or a :class:`PolicyConfig`.
        usage: ``{association: decayed GPU-seconds}`` for fair share (``e31``
            only); the key is :func:`~.fairtree.usage_key` (the account alone for its personal
            project); see :class:`~.priority.UsageLedger`.
        promises: ``{job id: epoch s}``, the "no later than" bound each queued job was last
            given (``Pending.latest_start`` of the previous cycle, as shown to its owner); under
            ``e31`` with ``keep_bounds`` the cycle keeps them (see :meth:`_Cycle.keeps_promises`).
        fair: the fair tree's project and member shares (``fairshare="tree"``; None: all equal).

    Returns:
        A :class:`Decision`: placements to start now; for every other job
        its queue position, estimated start and reason; the reservations.

    Raises:
        ValueError: unknown policy.
    """
    config = policy_resolve(policy)
    cycle = _Cycle(nodes, now, config)
    if config.name == "fifo":
        cycle.run_fifo(order_fifo(queue))
    elif config.name == "easy":
        cycle.run_backfill(order_fifo(queue), depth=1, shares={})
    else:
        order, shares = order_multifactor(queue, now, config, usage, sum(len(n.gpus) for n in nodes), fair)
        if config.keep_bounds:
            cycle.promise(queue, promises or {})
        cycle.run_backfill(order, depth=max(config.reservation_depth, 0), shares=shares,
                           shortest_first=config.backfill_order == "shortest")
    return cycle.decision


class _Cycle:
    """State of one cycle: the pool, what was decided, and why each job waits."""

    def __init__(self, nodes: Sequence[NodeView], now: float, config: PolicyConfig):
        self.now = now
        self.config = config
        self.predicting = config.name == "e31"
        self.pool = Pool(nodes, now, use_predictions=self.predicting)
        self.decision = Decision()
        self.waiting: list[tuple[JobRequest, str, float | None]] = []  # (job, why, reserved start)
        self.reserved_units: set[int] = set()
        self.guard_units: set[int] = set()   # the head's units in the plan by time limits (see guard)
        self.constrained: set[int] = set()   # reserved or guarded units
        self.keeping = False                 # bounds are promises (``e31`` with ``keep_bounds``)
        self.promises: dict[int, float] = {}
        self.fifo: list[JobRequest] = []     # the queue by (submit time, id): the order of the bound plan
        self.started: set[int] = set()

    def planned(self, job: JobRequest) -> float:
        """Seconds the plan gives ``job``: its prediction under ``e31`` (capped by the time limit),
        else its time limit."""
        limit = float(job.time_limit_s)
        if self.predicting and job.predicted_runtime_s is not None:
            return max(1.0, min(job.predicted_runtime_s, limit))
        return limit

    def place(self, job: JobRequest, units: list[int]) -> None:
        nodes = self.pool.take_now(job, units, self.planned(job), float(job.time_limit_s))
        self.decision.placements.append(Placement(job.job_id, nodes))
        self.started.add(job.job_id)

    # --- the bound as a promise (issue 14 item 3) -----------------------------

    def promise(self, queue: Sequence[JobRequest], promises: Mapping[int, float]) -> None:
        """Keep the bounds given before: ``promises`` ``{job id: epoch s}`` of queued jobs.

        The bound plan is list scheduling by time limits in submit order (what runs ends at its
        limit, what starts now holds its limit, each queued job after those submitted before it,
        none filling a gap before it; :class:`~.estimates.EstimateWalk`). A job's bound is its
        start there when it is first given; after that the cycle keeps it: no job starts now if,
        in that plan, a promised job would start after its promise (:meth:`keeps_promises`), and
        a promised job the plan starts now is started now when waiting for the next cycle could
        break a promise (:meth:`start_due`). Runs only end early (by their limits), which only
        moves the plan earlier, so a kept plan stays kept. Conservative backfilling's guarantee
        (Mu'alem and Feitelson 2001) given to every job, while the order of the queue stays
        multifactor priority wherever the promises leave room.
        """
        self.keeping = True
        ids = {j.job_id for j in queue}
        self.promises = {jid: float(b) for jid, b in promises.items() if jid in ids and b is not None}
        self.fifo = sorted(queue, key=lambda j: (j.submitted_at, j.job_id))
        if self.promises:  # a promise the plan can no longer keep (a node lost) moves to the plan's start,
            broken = [(job.job_id, start) for job, start, b in self._bound_walk()  # so it blocks nothing
                      if b is not None and (start is None or start > b)]
            for jid, start in broken:
                if start is None:
                    del self.promises[jid]
                else:
                    self.promises[jid] = float(math.ceil(start))

    def _bound_walk(self, extra: tuple[JobRequest, list[int]] | None = None,
                    stop_at_last_promise: bool = True):
        """Yield ``(job, start in the bound plan or None, promise or None)`` in submit order for
        every job not started this cycle; ``extra``: a job placed now on these units (a trial)."""
        walk = EstimateWalk(self.pool, limits=True)
        now, promises, started = self.now, self.promises, self.started
        skip = None
        if extra is not None:
            job, units = extra
            skip = job.job_id
            walk._take(units, job.gpus_per_node, float(job.time_limit_s), now)
        left = sum(1 for jid in promises if jid not in started and jid != skip)
        for job in self.fifo:
            jid = job.job_id
            if jid in started or jid == skip:
                continue
            if stop_at_last_promise and left <= 0:
                return
            b = promises.get(jid)
            if b is not None:
                left -= 1
            yield job, walk.place(job, float(job.time_limit_s), now), b

    def keeps_promises(self, job: JobRequest, units: list[int]) -> bool:
        """True if starting ``job`` now on ``units`` leaves every other promised job starting by
        its promise in the bound plan."""
        if not self.promises:
            return True
        for _other, start, b in self._bound_walk((job, units)):
            if b is not None and (start is None or start > b):
                return False
        return True

    def start_due(self) -> None:
        """Start the promised jobs the bound plan starts now, if the slack of some promise is
        shorter than the time to the next cycle the plan guarantees (the first end of a run by
        its limit: a replay, and the live loop, run a cycle at every end). Until that end, jobs
        the plan starts now and that wait delay every later job of the plan by at most the wait,
        so while every promise has at least that much slack, none is broken. A job not yet
        promised counts with the bound :meth:`kept_bounds` gives it at the end of this cycle (its
        plan start plus ``bound_slack_s``): with no slack, one the plan starts now is started now,
        not promised "now" and started at the next cycle."""
        fresh = len(self.promises) < len(self.fifo)  # some queued job gets its first bound this cycle
        if not self.promises and not fresh:
            return
        due, slack, give = [], math.inf, self.config.bound_slack_s
        for job, start, b in self._bound_walk(stop_at_last_promise=not fresh):
            if start is None:
                continue
            if b is None:
                b = float(math.ceil(start + give))
            slack = min(slack, b - start)
            if start <= self.now:
                due.append(job)
        if not due or slack >= self.next_end() - self.now:
            return
        for job in due:
            units = None
            if self.constrained:  # where it delays no reservation, if it can
                units, _why = self.pool.fit_now(job, self.allowed(job, self.planned(job), float(job.time_limit_s)),
                                                self.constrained)
            if not units:
                units, _why = self.pool.fit_now(job)
                if units and self.constrained:
                    self.drop_reservations_on(units)
            if units:
                self.place(job, units)
        gone = self.started
        self.waiting = [w for w in self.waiting if w[0].job_id not in gone]
        self.decision.reservations = [r for r in self.decision.reservations if r.job_id not in gone]

    def drop_reservations_on(self, units: list[int]) -> None:
        """A promise goes before a reservation by predictions: a job started by its promise on
        ``units`` may take GPUs a reservation on those nodes planned on, so those reservations are
        no longer reported (the jobs are estimated by the walk instead, later, never earlier)."""
        nodes = {self.pool.units[u].node.node_id for u in units}
        dropped = {r.job_id for r in self.decision.reservations if any(n in nodes for n, _ in r.nodes)}
        if dropped:
            self.decision.reservations = [r for r in self.decision.reservations if r.job_id not in dropped]
            self.waiting = [(j, why, None if j.job_id in dropped else start) for j, why, start in self.waiting]

    def next_end(self) -> float:
        """The first end (epoch s) of what runs or starts now, by time limits; inf if nothing."""
        now, first = self.now, math.inf
        for unit in self.pool.units:
            ends = unit.lends if unit.lends is not None else unit.ends
            if ends and ends[0] < first:
                first = ends[0]
            for start, end, _count in unit.lholds:
                if start <= now and end < first:
                    first = end
        return first

    # --- policies -------------------------------------------------------------

    def run_fifo(self, order: list[JobRequest]) -> None:
        """First come first served; the first job that cannot start blocks the rest."""
        blocked = False
        for job in order:
            if not blocked:
                units, why = self.pool.fit_now(job)
                if units:
                    self.place(job, units)
                    continue
                blocked = True
                self.waiting.append((job, why, None))
            else:
                self.waiting.append((job, "behind", None))
        self.finish(monotone=True, shares={})

    def run_backfill(self, order: list[JobRequest], depth: int, shares: dict[str, float],
                     shortest_first: bool = False) -> None:
        """Start what fits without delaying a reservation; reserve for the first ``depth`` that cannot.

        A job past ``starvation_s`` that fits now but is held back only by a promise
        (:meth:`keeps_promises`) takes its place among the ``depth`` but gets no reservation, and
        no job below it gets one in its place: the promised jobs of the bound plan are what it
        waits for, and a reservation "now" on GPUs free now would keep them idle until a promise
        falls due (issue 25 item 4: with starved jobs ordered by fair share, not in the bound
        plan's submit order, that idled 22 % of the pool in the busy-week replay). A younger job
        so held still gets its reservation: on KTH-SP2 dropping those too (or passing them down
        the queue) lengthened the 9+ GPU tail by 4-14 % (docs/benchmarks-scheduler.md).

        ``shortest_first``: once the ``depth`` reservations are made, the jobs
        left are tried in order of planned run time, shortest first (SJBF,
        Tsafrir, Etsion and Feitelson 2007); queue positions stay in ``order``.
        """
        failed: dict[tuple, list[tuple[float, float, str]]] = {}
        reservations = 0
        rest: list[tuple[float, int, JobRequest]] = []
        for index, job in enumerate(order):
            if shortest_first and reservations >= depth:
                rest.append((self.planned(job), index, job))
                continue
            units, why = self.try_now(job, failed)
            if units:
                self.place(job, units)
                continue
            start = None
            if reservations < depth and why == "promise" and self.now - job.submitted_at >= self.config.starvation_s:
                # A starved job that fits now but would put another past its promise: the bound plan
                # holds those GPUs already, and a reservation "now" would keep them idle (see above).
                reservations += 1
            elif reservations < depth:
                start, res_units = self.pool.earliest(job, self.planned(job))
                if start is not None:
                    reservations += 1
                    self.reserve(job, start, res_units, head=reservations == 1)
            self.waiting.append((job, why, start))
        if rest:
            rank = {job.job_id: index for index, job in enumerate(order)}
            rest.sort(key=lambda r: r[:2])
            for _planned, _index, job in rest:
                units, why = self.try_now(job, failed)
                if units:
                    self.place(job, units)
                else:
                    self.waiting.append((job, why, None))
            self.waiting.sort(key=lambda w: rank[w[0].job_id])
        if self.keeping:
            self.start_due()
        self.finish(monotone=False, shares=shares)

    def try_now(self, job: JobRequest,
                failed: dict[tuple, list[tuple[float, float, str]]]) -> tuple[list[int] | None, str]:
        """Fit ``job`` now without delaying a reservation.

        Within a cycle the pool only fills up, so once a job shape failed
        with (planned, limit) seconds, any job of that shape asking as long
        or longer on as many nodes fails too: ``failed`` keeps those to skip the search.
        """
        shape, planned, limit = (shape_of(job), job.nodes), self.planned(job), float(job.time_limit_s)
        for p, lim, why in failed.get(shape, ()):
            if p <= planned and lim <= limit:
                return None, why
        if self.constrained:
            units, why = self.pool.fit_now(job, self.allowed(job, planned, limit), self.constrained)
        else:
            units, why = self.pool.fit_now(job)
        if units is not None and self.keeping and not self.keeps_promises(job, units):
            failed.setdefault(shape, []).append((0.0, limit, "promise"))  # as long or longer fails too
            return None, "promise"
        if units is None:
            if why == "reservation":
                failed.setdefault(shape, []).append((planned, limit, why))
            else:  # not enough GPUs, CPUs or memory free now: true whatever the duration
                failed.setdefault(shape, []).append((0.0, 0.0, why))
        return units, why

    def allowed(self, job: JobRequest, planned: float, limit: float):
        """The backfill test for one unit: ``job`` delays no reservation held there.

        By the job's declared time limit (SPEC §5, and EASY); by its planned
        run time only under ``e31`` with ``backfill_by_limit`` off (EASY++).
        """
        k, now, pool = job.gpus_per_node, self.now, self.pool
        reserved = self.reserved_units
        by_limit = self.config.name != "e31" or self.config.backfill_by_limit
        guard = self.guard_units

        def test(unit: Unit) -> bool:
            idx = unit.idx
            if idx in reserved:
                duration = limit if by_limit else planned
                if pool.profile(unit).min_free(now, now + duration) < k:
                    return False
            return idx not in guard or pool.profile(unit, limits=True).min_free(now, now + limit) >= k

        return test

    def reserve(self, job: JobRequest, start: float, units: list[int], head: bool) -> None:
        nodes = self.pool.reserve(job, start, units, self.planned(job))
        self.reserved_units.update(units)
        self.constrained.update(units)
        if head:
            guard_after = self.config.guard_after_s
            guard_after = self.config.starvation_s if guard_after is None else guard_after
            if self.predicting and self.now - job.submitted_at >= guard_after:
                self.guard(job)
        self.decision.reservations.append(Reservation(job.job_id, start, nodes))

    def guard(self, job: JobRequest) -> None:
        """EASY's guarantee for a head that has waited ``guard_after_s``: its start in the plan by
        time limits (what runs and what starts now, each to its limit), held there, and judged
        by time limits on those units, so backfill that outlives its prediction cannot push it
        past the start EASY would give it. The start by limits never moves later while it stays
        the head, so a waiting job is bounded."""
        start, units = self.pool.earliest(job, float(job.time_limit_s), limits=True)
        if start is None:
            return
        self.pool.reserve_limits(job, start, units, float(job.time_limit_s))
        self.guard_units.update(units)
        self.constrained.update(units)

    # --- estimates and reasons ------------------------------------------------

    def finish(self, *, monotone: bool, shares: dict[str, float]) -> None:
        """Estimate every waiting job (reserved ones: their reservation) and write its reason; its
        planned nodes (``Pending.nodes``: the reservation's, else the estimate walk's) are where
        pre-staging sends its inputs (issue 14 item 5).

        ``monotone``: no job may start before one ahead of it (``fifo``).
        """
        walk = None
        bounds = EstimateWalk(self.pool, limits=True) if self.waiting and not self.keeping else None
        kept = self.kept_bounds() if self.waiting and self.keeping else {}
        not_before = not_latest = self.now
        reserved_on = {r.job_id: tuple(n for n, _ in r.nodes) for r in self.decision.reservations}
        likely: dict[int, tuple[float | None, tuple]] = {}
        if self.predicting and self.config.estimate_order == "shortest" and self.waiting:
            # the likely plan tries the jobs in the order the cycle does: shortest planned run first
            walk = EstimateWalk(self.pool)
            rest = sorted((self.planned(w[0]), position, w[0]) for position, w in enumerate(self.waiting)
                          if w[2] is None)
            for planned, _position, job in rest:
                likely[job.job_id] = (walk.place(job, planned, self.now), walk.last_nodes)
        for position, (job, why, reserved) in enumerate(self.waiting, 1):
            start = reserved
            nodes = reserved_on.get(job.job_id, ())
            if start is None and job.job_id in likely:
                start, nodes = likely[job.job_id]
            elif start is None:
                walk = walk or EstimateWalk(self.pool)
                start = walk.place(job, self.planned(job), not_before)
                nodes = walk.last_nodes
            if bounds is None:
                latest = kept.get(job.job_id)
            else:
                latest = bounds.place(job, float(job.time_limit_s), not_latest)
                if latest is not None:
                    not_latest = latest  # the bound never puts a job before one ahead of it
            if start is not None:
                start = max(start, self.now)
                if monotone:
                    not_before = start
                if bounds is None:  # a kept bound is the promise: the likely start is never after it
                    start = start if latest is None else min(start, latest)
                else:
                    latest = None if latest is None else max(latest, start)
            reason = self.reason(job, position, why, start, reserved, shares)
            self.decision.pending.append(Pending(job.job_id, position, start, reason, latest,
                                                 nodes if start is not None else ()))

    def kept_bounds(self) -> dict[int, float]:
        """``{job id: bound}`` of every job waiting: its promise, or (a new job, or a promise the
        plan can no longer keep: a node lost) its start in the bound plan plus ``bound_slack_s``,
        rounded up to the second (the live site stores whole seconds and passes them back)."""
        out = {}
        slack = self.config.bound_slack_s
        for job, start, b in self._bound_walk(stop_at_last_promise=False):
            if start is None:
                continue
            if b is not None and start <= b:
                out[job.job_id] = b
            else:
                out[job.job_id] = float(math.ceil(start + (slack if b is None else 0.0)))
        return out

    def reason(self, job: JobRequest, position: int, why: str, start: float | None,
               reserved: float | None, shares: dict[str, float]) -> str:
        """Plain words for why ``job`` waits."""
        want = describe_request(job)
        if start is None:
            if self.pool.could_hold_somewhere(job):
                return f"waiting for a node that can hold {want} to be up"
            if one_kind(job) and self.pool.could_hold_somewhere(replace(job, mixed_models=True)):
                return (f"no {job.nodes} nodes of one GPU model in the pool can hold {want} "
                        "(compute.mixed_models: true lets a gang mix models)")
            return f"no node in the pool can hold {want}"
        if why == "one_model":  # its own blocker, whatever is ahead of it
            text = (f"waiting for {want} of one GPU model: the GPUs free now are on nodes of different models "
                    "(compute.mixed_models: true lets a gang mix them)")
            return text if reserved is None else f"{text}; reserved from {_clock(reserved, self.now)}"
        if reserved is not None:
            text = f"waiting for {want}; reserved from {_clock(reserved, self.now)}"
            if why == "resources":
                text = (f"waiting for {want} with {job.cpus} CPUs and {mib_to_gb(job.memory_mib):g} GB of memory "
                        f"free; reserved from {_clock(reserved, self.now)}")
            return text
        ahead = position - 1
        jobs = f"{ahead} job{'s' if ahead != 1 else ''}"
        if self.config.name == "fifo":
            if position == 1:
                return f"waiting for {want} to come free"
            return f"behind {jobs} ahead in the queue (first come, first served)"
        if why == "reservation":
            text = f"waiting for {want} that no reserved job needs first"
        elif self.config.name == "easy":
            text = f"behind {jobs} ahead in the queue" if ahead else f"waiting for {want}"
        else:
            text = f"behind {jobs} of higher priority" if ahead else f"waiting for {want}"
        if shares.get(job_usage_key(job), 1.0) < 0.5:
            text += "; over its fair share (by project, then user)" if self.config.fairshare == "tree" else \
                "; account over its fair share"
        return text


def _clock(t: float, now: float) -> str:
    """``02:10`` (UTC) if within the next 20 hours, else ``3 May 02:10``."""
    when = datetime.fromtimestamp(t, UTC)
    if t - now < 20 * 3600:
        return f"{when:%H:%M}"
    return f"{when.day} {when:%b %H:%M}"
