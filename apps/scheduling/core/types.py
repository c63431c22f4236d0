"""Plain data the scheduling core reads and returns. Times are seconds since the epoch."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobRequest:
    """A queued job as the scheduler sees it.

    ``gpu_models`` empty means any model; ``gpu_memory_mib``, ``cpus`` and
    ``memory_mib`` are minimums per GPU / per node, 0 when not asked.
    A gang (``nodes`` > 1) with no ``gpu_models`` is of one kind: all its ranks on GPUs of one
    model, unless ``mixed_models`` (:func:`~.matching.one_kind`). ``only_model`` is the core's
    own: the exact model one trial of such a gang is limited to ("" for every job it is given).
    """

    job_id: int
    account: str
    submitted_at: float
    gpus_per_node: int
    nodes: int
    time_limit_s: int
    gpu_models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    cpus: int = 0
    memory_mib: int = 0
    needs_runtime: bool = False
    priority_boost: int = 0
    predicted_runtime_s: float | None = None  # for planning only, never to stop a job; None: use the limit
    inputs: tuple[str, ...] = ()  # e31_protocol.inputs identities of its inputs, for cache affinity
    input_bytes: int = 0  # summed size of its inputs, bytes (for the pre-stage horizon)
    mixed_models: bool = False  # a gang without gpu_models may take GPUs of several models
    only_model: str = ""  # set by the core only (Pool.kinds): this exact GPU model
    project: str = ""  # fair-share project key (issue 25 item 4); "": the account's personal project


@dataclass(frozen=True)
class GpuSlot:
    """One GPU: id in the database, model name, memory in MiB (NVML's unit), and when it is
    expected free (``free_at`` <= now means free now; else the end of the
    time limit of the lease holding it)."""

    gpu_id: int
    model: str
    memory_mib: int
    free_at: float = 0.0
    expected_free_at: float | None = None  # by the holder's predicted runtime; None: same as free_at
    started_at: float | None = None  # when the holder's run started (the overrun rule's base); None: unknown


@dataclass
class NodeView:
    """One node: its state, GPUs, and resources not held by running leases."""

    node_id: int
    name: str
    state: str
    gpus: list[GpuSlot]
    cpus_free: int = 0
    memory_free_mib: int = 0
    cpus_total: int = 0
    memory_total_mib: int = 0
    runtimes: tuple[str, ...] = ()
    cached: frozenset[str] = frozenset()  # input identities its cache holds (agents report them); cache affinity
    staging_rate_bps: float | None = None  # measured input download rate, bytes/s; None: not known


@dataclass(frozen=True)
class Placement:
    """Start ``job_id`` now on these nodes: ``[(node_id, (gpu_id, ...)), ...]``, rank order."""

    job_id: int
    nodes: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Pending:
    """Why a queued job waits and when it should start (epoch seconds, or None if unknown):
    ``estimated_start`` is the likely start (the plan by predictions), ``latest_start`` the bound
    by time limits (``squeue --start``), never earlier than the likely one."""

    job_id: int
    queue_position: int
    estimated_start: float | None
    reason: str
    latest_start: float | None = None  # "no later than": the start in the plan by time limits (see core)
    nodes: tuple[int, ...] = ()  # node ids the plan expects it to start on (rank order); () if none


@dataclass(frozen=True)
class FairShares:
    """The operator's fair-share weights for :func:`~.fairtree.fairtree_factors` (Slurm's
    ``Fairshare`` of an association, https://slurm.schedmd.com/fair_tree.html): ``projects`` by
    tree project key (:func:`~.fairtree.tree_project`; ``Project.share``), ``users`` by usage key
    (:func:`~.fairtree.usage_key`; ``Membership.share``, the user's weight within the project).
    Plain numbers, compared only with their siblings'; a missing key counts 1."""

    projects: Mapping[str, float] = field(default_factory=dict)
    users: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyConfig:
    """How a cycle orders and plans. ``name`` is ``fifo``, ``easy`` or ``e31``.

    Weights follow Slurm's priority/multifactor plugin
    (https://slurm.schedmd.com/priority_multifactor.html): each factor is
    normalised to [0, 1] and multiplied by its weight (the operator boost is
    added as it is, like Slurm's admin "nice" adjustment).
    ``reservation_depth``: how many blocked top jobs get a reservation
    (``easy`` always 1, ``fifo`` none). ``age_max_s``: the wait at which the
    age factor reaches 1 (Slurm ``PriorityMaxAge``). ``starvation_s``: a job
    waiting this long goes before every younger job whatever its priority
    (first come, first served among such jobs), so no job waits forever.
    ``backfill_order``: ``priority`` (the jobs after the reserved ones are tried in queue order;
    the default since issue 14, docs/benchmarks-scheduler.md) or ``shortest`` (shortest planned
    run first, SJBF).
    ``backfill_by_limit``: a job may backfill onto a reservation's GPUs only
    if it delays no reservation *by its declared time limit* (SPEC §5; the
    default). False gives EASY++ (Tsafrir et al. 2007): backfill judged by
    predictions, which lowers mean slowdown but lets a job that outlives its
    prediction delay a reservation; then a head that has waited
    ``guard_after_s`` (None: as long as ``starvation_s``) is guarded by its
    start in the plan by time limits.
    ``weight_slowdown`` and ``slowdown_max``: the slowdown factor of
    :mod:`.priority` (0 turns it off). ``weight_size``: the job-size factor of :mod:`.priority`
    (GPUs asked over the pool's; Slurm ``PriorityWeightJobSize`` favouring large jobs).
    ``keep_bounds`` (``e31``): a "no later than" bound once given is a promise the cycle keeps
    (see :mod:`.core`); ``bound_slack_s``: a new job's bound is its start in the plan by time
    limits plus this (a looser promise leaves the priority order more room).
    ``estimate_order`` (``e31``): the likely plan places the jobs neither started nor reserved in
    queue order (``queue``) or shortest planned run first (``shortest``, the order backfill tries them).
    ``starved_order``: the jobs that waited ``starvation_s`` go first, in submit order (``fifo``, the
    default, so earlier replays reproduce), widest first, then by submit time (``widest``: a wide
    job cannot backfill, narrow ones can), or by their association's fair-share factor, then by
    submit time (``fairshare``: the live site's, ``apps.scheduling.adapter.LIVE_STARVED_ORDER``, so
    under demand that outgrows the pool the shares, not the arrivals, divide it; issue 25 item 4,
    :func:`~.priority.order_multifactor`).
    ``fairshare`` (``e31``): ``classic``, Slurm's classic factor ``2 ** (-U / S)`` per association
    with equal shares (:func:`~.priority.fairshare_factor`; the replays' default, so earlier figures
    reproduce), or ``tree``, Slurm's Fair Tree by project, then by user within it, with the
    operator's shares (:mod:`.fairtree`; the live site's default, issue 25 item 4).
    Times in seconds.
    """

    name: str = "e31"
    reservation_depth: int = 1
    weight_age: float = 1000.0
    weight_fairshare: float = 1000.0
    weight_boost: float = 1.0
    age_max_s: float = 86400.0
    fairshare_half_life_s: float = 7 * 86400.0
    starvation_s: float = 12 * 3600.0
    backfill_order: str = "priority"
    backfill_by_limit: bool = True
    guard_after_s: float | None = None
    weight_slowdown: float = 1000.0
    slowdown_max: float = 50.0
    keep_bounds: bool = True
    bound_slack_s: float = 0.0
    estimate_order: str = "queue"
    starved_order: str = "fifo"
    weight_size: float = 3000.0
    fairshare: str = "classic"


@dataclass(frozen=True)
class Reservation:
    """GPUs held in the plan for a job that cannot start yet, from ``start`` (epoch s)."""

    job_id: int
    start: float
    nodes: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass
class Decision:
    """What one cycle decided."""

    placements: list[Placement] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
