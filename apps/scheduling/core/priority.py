"""Job order: first come first served, or Slurm-style multifactor priority with fair share.

Multifactor priority follows Slurm's priority/multifactor plugin
(https://slurm.schedmd.com/priority_multifactor.html)::

    priority = weight_age * age + weight_fairshare * fairshare + weight_boost * boost
               + weight_slowdown * slowdown + weight_size * size

where ``age = min(wait / age_max, 1)``, ``size = GPUs asked / GPUs in the pool`` (Slurm's job-size
factor with ``PriorityFavorSmall=NO``: the slowdown factor favours short jobs, this one keeps wide
ones from being left behind every narrow one; issue 14 item 4), ``slowdown = min(wait / planned run
/ slowdown_max, 1)`` (Maui's "expansion factor": a short job that has waited
long for its length rises; planned run = prediction, else time limit) and ``fairshare = 2 ** (-U / S)``
(Slurm's classic fair-share formula: ``U`` the account's share of the
decayed usage of all accounts, ``S`` its share of the pool; every account
has an equal share here), or with ``PolicyConfig.fairshare = "tree"`` Slurm's Fair Tree by project,
then by user (:mod:`.fairtree`, https://slurm.schedmd.com/fair_tree.html). An account is an
association (project, user): its usage key is :func:`~.fairtree.usage_key`. Usage is GPU-seconds
decayed with a half-life (Slurm ``PriorityDecayHalfLife``, default 7 days here), kept incrementally
by :class:`UsageLedger`.

Runtime prediction follows Tsafrir, Etsion and Feitelson, "Backfilling
using system-generated predictions rather than user runtime estimates",
IEEE TPDS 18(6), 2007: the mean of the account's last two actual run times,
capped by the job's time limit.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from .fairtree import fairtree_factors, job_usage_key
from .types import FairShares, JobRequest, PolicyConfig


def decay(value: float, elapsed_s: float, half_life_s: float) -> float:
    """``value`` after ``elapsed_s`` seconds of exponential decay with half-life ``half_life_s``.

    A half-life <= 0 means no memory: everything has decayed.
    """
    if half_life_s <= 0:
        return 0.0
    if elapsed_s <= 0:
        return value
    return value * math.pow(2.0, -elapsed_s / half_life_s)


RECENT_RUNS = 2  # run times an account's history keeps for :func:`predict_runtime`


def charge(value: float, stamp: float, gpu_seconds: float, at: float,
           half_life_s: float) -> tuple[float, float]:
    """One account's decayed usage ``(value GPU-seconds, stamp epoch s)`` after charging
    ``gpu_seconds`` (negative counts as 0) at ``at``: the stored value decays from its stamp to
    ``at``, then the charge is added; the stamp never goes back. The one fair-share ledger rule,
    kept in memory by :class:`UsageLedger` (replays) and in ``AccountUsage`` rows by
    :func:`apps.scheduling.usage.usage_record` (the live site)."""
    return decay(value, at - stamp, half_life_s) + max(0.0, gpu_seconds), max(at, stamp)


def remember_run(recent_runs_s: Sequence[float], runtime_s: float) -> list[float]:
    """An account's run-time history after a run of ``runtime_s`` seconds ended: the last
    :data:`RECENT_RUNS`, oldest first, rounded to the millisecond."""
    return [*recent_runs_s, round(max(0.0, runtime_s), 3)][-RECENT_RUNS:]


class UsageLedger:
    """Decayed GPU-seconds per account, kept incrementally (never re-summed from history).

    Each account keeps ``(value, stamp)``; reading or adding decays the stored
    value from its stamp to the given time (:func:`charge`), so each update is O(1).
    """

    def __init__(self, half_life_s: float = 7 * 86400.0):
        self.half_life_s = half_life_s
        self._usage: dict[str, tuple[float, float]] = {}

    def add(self, account: str, gpu_seconds: float, at: float) -> None:
        """Charge ``gpu_seconds`` to ``account`` at time ``at`` (epoch s)."""
        value, stamp = self._usage.get(account, (0.0, at))
        self._usage[account] = charge(value, stamp, gpu_seconds, at, self.half_life_s)

    def snapshot(self, now: float) -> dict[str, float]:
        """``{account: decayed GPU-seconds at now}`` of every account charged so far (the live
        site passes every account's too), the ``usage`` argument of :func:`schedule`."""
        hl = self.half_life_s
        return {a: decay(v, now - t, hl) for a, (v, t) in self._usage.items()}


def held_until(started_at: float, time_limit_s: float, predicted_runtime_s: float | None,
               now: float) -> tuple[float, float | None, float]:
    """``(free_at, expected_free_at, started_at)`` of a GPU held by a run that started at
    ``started_at`` (epoch s): its time limit's end, never before ``now + 1`` (a run past its limit
    but not yet released frees "any moment now"), its predicted end (None without a
    prediction), and the start. What the live adapter and the replay both put in
    :class:`~.types.GpuSlot`; an overrun prediction is handled by :func:`planned_end`."""
    free_at = max(started_at + time_limit_s, now + 1)
    return free_at, None if predicted_runtime_s is None else started_at + predicted_runtime_s, started_at


def fairshare_factor(account_usage: float, total_usage: float, n_accounts: int) -> float:
    """Slurm classic fair-share factor ``2 ** (-U / S)`` in (0, 1].

    ``U = account_usage / total_usage`` (decayed GPU-seconds), ``S = 1 /
    n_accounts`` (equal shares). 1 for an account that used nothing, 0.5 for
    one that used exactly its share, near 0 for one that used far more.
    """
    if total_usage <= 0 or account_usage <= 0 or n_accounts <= 0:
        return 1.0
    return math.pow(2.0, -(account_usage / total_usage) * n_accounts)


def predict_runtime(recent_runs: Sequence[float], time_limit_s: float) -> float:
    """Planned run time of a new job, in seconds: the mean of the account's last two
    actual run times (``recent_runs``, oldest first), capped by the job's time limit;
    the time limit when the account has no history (Tsafrir, Etsion, Feitelson 2007).

    For planning and estimates only: a job is never stopped at its prediction.
    """
    runs = [r for r in recent_runs[-2:] if r is not None and r >= 0]
    if not runs:
        return float(time_limit_s)
    return max(1.0, min(float(time_limit_s), sum(runs) / len(runs)))


def planned_end(free_at: float, expected_free_at: float | None, now: float,
                started_at: float | None = None) -> float:
    """When a held GPU should come free for planning, in epoch seconds.

    The holder's predicted end; if the holder has outlived its prediction, the
    prediction is raised (Tsafrir et al. 2007 raise an underestimated
    prediction rather than trust it), never past the time limit. With the
    run's start known, in steps: the predicted length doubles each time the run
    outlives it (``start + p * 2**k``, the first such end after ``now``), so the
    plan, and the estimates behind it, move only when a run outlives its
    prediction again, not at every cycle (issue 14 item 3). Without the start:
    as long again as it has overrun, at least 60 s from now.
    """
    if free_at <= now:
        return free_at
    if expected_free_at is None or expected_free_at >= free_at:
        return free_at
    if expected_free_at > now:
        return expected_free_at
    if started_at is None or started_at >= expected_free_at:
        return min(free_at, now + max(60.0, now - expected_free_at))
    predicted = expected_free_at - started_at
    steps = math.floor(math.log2((now - started_at) / predicted)) + 1
    end = started_at + predicted * 2.0 ** steps
    while end <= now:  # float rounding at an exact step
        end += predicted * 2.0 ** (steps - 1)
        steps += 1
    return min(free_at, end)


def order_fifo(queue: Iterable[JobRequest]) -> list[JobRequest]:
    """Operator boost first, then submit time, then id (stable ties)."""
    return sorted(queue, key=lambda j: (-j.priority_boost, j.submitted_at, j.job_id))


def fairshare_factors(queue: Iterable[JobRequest], usage: Mapping[str, float] | None) -> dict[str, float]:
    """Classic fair-share factor per association of the queue (:func:`~.fairtree.usage_key`: the
    account for a personal project), equal shares among the associations that have usage or
    queued jobs."""
    usage = usage or {}
    accounts = {job_usage_key(j) for j in queue}
    total = sum(v for v in usage.values() if v > 0)
    n = len(accounts | {a for a, v in usage.items() if v > 0})
    return {a: fairshare_factor(usage.get(a, 0.0), total, n) for a in accounts}


def priority(job: JobRequest, now: float, config: PolicyConfig, fairshare: float,
             total_gpus: int = 0) -> float:
    """Multifactor priority of one job (higher goes first); see the module docstring.
    ``total_gpus``: the pool's GPUs, for the job-size factor (0: no size factor)."""
    wait = max(now - job.submitted_at, 0.0)
    age = min(wait / config.age_max_s, 1.0) if config.age_max_s > 0 else 1.0
    value = config.weight_age * age + config.weight_fairshare * fairshare + config.weight_boost * job.priority_boost
    if config.weight_size and total_gpus > 0:
        value += config.weight_size * min(job.gpus_per_node * job.nodes / total_gpus, 1.0)
    if config.weight_slowdown:
        value += config.weight_slowdown * slowdown_factor(job, wait, config.slowdown_max)
    return value


def slowdown_factor(job: JobRequest, wait: float, slowdown_max: float) -> float:
    """The job's slowdown so far, ``wait / planned run`` (planned: its prediction capped by its
    limit, else its limit; at least 10 s, as bounded slowdown), over ``slowdown_max``, at most 1:
    Maui's "expansion factor", which lifts short jobs that have waited long relative to their run."""
    limit = float(job.time_limit_s)
    planned = limit if job.predicted_runtime_s is None else min(job.predicted_runtime_s, limit)
    if slowdown_max <= 0:
        return 1.0
    return min(wait / max(planned, 10.0) / slowdown_max, 1.0)


def order_multifactor(queue: Iterable[JobRequest], now: float, config: PolicyConfig,
                      usage: Mapping[str, float] | None,
                      total_gpus: int = 0, fair: FairShares | None = None) -> tuple[list[JobRequest], dict[str, float]]:
    """Jobs waiting ``starvation_s`` or more first (boost, then ``config.starved_order``), then the
    rest by multifactor priority; ties by submit time, then id. The fair-share factor is the
    classic one or the fair tree's (``config.fairshare``; ``fair``: the tree's shares).

    Among the starved jobs, ``starved_order``: ``fifo``, submit time; ``widest``, most GPUs first,
    then submit time; ``fairshare``, the association's fair-share factor, highest first, then submit
    time (each association's own starved jobs stay first come first served). Under demand that
    outgrows the pool every job waits past ``starvation_s``, so the starved order *is* the order: by
    submit time the split follows the arrivals (a project that submits twice as much gets two
    thirds), by fair share it follows the shares (Slurm's principle that fair share, not arrival,
    divides a contended machine: priority/multifactor, "Fair-share Factor",
    https://slurm.schedmd.com/priority_multifactor.html). Measured on issue 25's busy week
    (docs/benchmarks-scheduler.md): ``fifo`` 850 / 430 GPU-hours between a ten-user and a one-user
    project of equal share; a guard scaled by the association's ``U / S`` (twice as long a wait
    before the guard for an association at twice its share) 880 / 399, since under sustained
    overload every job passes any such threshold and the order among the starved is again submit
    time; ``fairshare`` 621 / 680 (9 % apart; 3-7 % on seeds 7, 8 and 10). It costs the starved jobs of
    the heaviest accounts: on SWF traces the 9+ GPU tail and the worst account's bounded slowdown
    rise (the figures there), which is why replays keep ``fifo`` unless asked. The guard still puts
    starved work before younger work, and no job waits forever: an association whose starved jobs
    are passed over uses less, so its decayed usage falls behind the others' until its factor leads
    (the fair tree's and the classic factor both rise as ``U / S`` falls), and under ``e31`` every
    job also has its "no later than" bound, in submit order (:mod:`.core`).

    Returns the order and the fair-share factor per association (:func:`~.fairtree.usage_key`),
    for reasons.
    """
    queue = list(queue)
    if config.fairshare == "tree":
        shares = fairtree_factors(queue, usage, fair)
    else:
        shares = fairshare_factors(queue, usage)

    def key(job: JobRequest):
        if now - job.submitted_at >= config.starvation_s:
            if config.starved_order == "widest":
                return (0, -job.priority_boost, -job.gpus_per_node * job.nodes, job.submitted_at, job.job_id)
            if config.starved_order == "fairshare":
                return (0, -job.priority_boost, -shares[job_usage_key(job)], job.submitted_at, job.job_id)
            return (0, -job.priority_boost, 0, job.submitted_at, job.job_id)
        return (1, -priority(job, now, config, shares[job_usage_key(job)], total_gpus), 0, job.submitted_at,
                job.job_id)

    return sorted(queue, key=key), shares
