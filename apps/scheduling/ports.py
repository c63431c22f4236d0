"""The port through which scheduling reads and places jobs (issue 13): scheduling sits below the
jobs and metering apps and never imports them; the jobs app implements :class:`JobQueue`
(:class:`apps.jobs.queue.DatabaseJobQueue`) and registers it in its ``AppConfig.ready()``.

Rows cross the port as plain typed tuples (no model instances, no job specs): memory in MiB,
times as epoch seconds.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from django.core.exceptions import ImproperlyConfigured


class QueuedJob(NamedTuple):
    """A queued job as the scheduler sees it: the job's typed requirement columns (SPEC §2)."""

    job_id: int
    owner_id: int
    submitted_at_s: float  # epoch seconds
    gpus_per_node: int
    nodes: int
    time_limit_s: int
    priority_boost: int
    gpu_models: tuple[str, ...]  # empty: any model
    gpu_memory_mib: int  # per GPU, 0: any
    cpus: int  # per node, 0: not asked
    memory_mib: int  # per node, 0: not asked
    needs_runtime: bool  # names a container image
    mixed_models: bool  # a gang without gpu_models may mix GPU models (SPEC §5)
    queue_position: int | None  # as last written
    estimated_start_s: float | None  # as last written, epoch seconds
    pending_reason: str  # as last written
    latest_start_s: float | None = None  # "no later than" as last written, epoch seconds
    project_id: int | None = None  # Job.project (issue 25 item 4); None: the owner's personal project


class Hold(NamedTuple):
    """One open lease's hold of GPUs on one node (GPUs of a fenced lease included)."""

    node_id: int
    rented_at_s: float  # epoch seconds
    time_limit_s: int
    predicted_runtime_s: float | None
    cpus: int  # the job's CPUs per node
    memory_mib: int  # the job's memory per node


class JobInputs(NamedTuple):
    """A queued job's inputs as pre-staging and cache affinity see them (issue 14 item 5)."""

    identities: tuple[str, ...]  # e31_protocol.inputs.input_identity of each input (owner-scoped uploads)
    total_bytes: int  # summed size; an input of unknown size counts E31_PRESTAGE_UNKNOWN_INPUT_BYTES


class PositionChange(NamedTuple):
    """A queued job's new place, estimated start and reason, to store and push."""

    job_id: int
    owner_id: int
    queue_position: int | None  # None: held out of the plan (JobQueue.held_back)
    estimated_start_at: datetime | None  # likely start
    pending_reason: str
    latest_start_at: datetime | None = None  # "no later than"


class JobQueue(Protocol):
    """What scheduling needs from the jobs app. Every method runs inside the cycle's transaction."""

    def queued(self) -> list[QueuedJob]:
        """Every queued job, in submit order (oldest first, then by id)."""
        ...

    def held_back(self, *, now: datetime) -> tuple[dict[int, str], set[int]]:
        """The queued jobs the plan leaves out: those waiting for their dependencies, by id, with their
        pending reason, and the ids of those released here because they can never start."""
        ...

    def holds(self) -> tuple[dict[int, Hold], list[tuple[int, int]]]:
        """The open holds by lease id, and the held GPUs as ``(gpu_id, lease_id)`` pairs."""
        ...

    def place(self, placements: Sequence[tuple[int, Sequence[tuple[int, Sequence[int]]]]], *,
              predicted_runtime_s: Mapping[int, float], now: datetime | None = None) -> datetime:
        """Rent GPUs to queued jobs: ``placements`` is ``[(job_id, [(node_id, [gpu_id, ...]) by rank])]``.
        Opens each job's leases (``predicted_runtime_s[job_id]`` kept for planning) and moves the job
        to rented. The meter starts at ``now`` when given (a frozen clock), else at the clock read
        once the locks the lease writes need are held; returns that rent time."""
        ...

    def prestage(self, reservations: Iterable[tuple[int, list[int]]], *, now: datetime) -> set[int]:
        """Make the pre-stage plan ``[(job_id, [node_id by rank])]``; the ids of nodes with new work."""
        ...

    def inputs(self) -> dict[int, JobInputs]:
        """The inputs of every queued job that declares any, by job id."""
        ...

    def staging_rates(self) -> dict[int, float]:
        """Each node's last measured input download rate, bytes per second (nodes with none left out)."""
        ...

    def write_positions(self, changed: Sequence[PositionChange]) -> None:
        """Store the changed queue places of still-queued jobs and push them to their owners."""
        ...


_queue: JobQueue | None = None


def register(queue: JobQueue) -> None:
    """Make ``queue`` the job queue scheduling uses (called by the jobs app's ``ready()``)."""
    global _queue
    _queue = queue


def job_queue() -> JobQueue:
    """The registered job queue.

    Raises:
        ImproperlyConfigured: no app registered one (``apps.jobs`` missing from INSTALLED_APPS).
    """
    if _queue is None:
        raise ImproperlyConfigured("no job queue registered: apps.jobs must be in INSTALLED_APPS")
    return _queue
