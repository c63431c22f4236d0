"""The one builder of the scheduler's view of a job (:class:`~.types.JobRequest`).

The live cycle (a queued row read through :mod:`apps.scheduling.ports`), the submit check (a job
not saved yet) and the trace simulator (a :class:`~apps.scheduling.simulator.swf.TraceJob`) hand
it their typed requirement columns, so a column added to the request is read in one place.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .types import JobRequest


class Requirements(Protocol):
    """What a job asks for, as typed columns (SPEC §2 compute part): GPUs per node and nodes, the
    time limit (s), the models it accepts (empty or None: any), minimums per GPU (``gpu_memory_mib``,
    MiB) and per node (``cpus``, ``memory_mib``, MiB; 0: not asked), whether it names a container
    image, its priority boost, and whether a gang without models may mix GPU models."""

    @property
    def gpus_per_node(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def time_limit_s(self) -> int: ...
    @property
    def gpu_models(self) -> Sequence[str] | None: ...
    @property
    def gpu_memory_mib(self) -> int: ...
    @property
    def cpus(self) -> int: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def needs_runtime(self) -> bool: ...
    @property
    def priority_boost(self) -> int: ...
    @property
    def mixed_models(self) -> bool: ...


def job_request(
    job: Requirements,
    *,
    job_id: int,
    account: object,
    submitted_at_s: float,
    predicted_runtime_s: float | None = None,
    inputs: tuple[str, ...] = (),
    input_bytes: int = 0,
    project: str = "",
) -> JobRequest:
    """The scheduler's view of ``job``: its requirement columns, with its id (0: not saved yet),
    its ``account`` (the owner, as text: the fair-share key), when it was submitted (epoch s), its
    predicted runtime (s; None: plan with the limit), and the identities and summed bytes of its
    inputs (for cache affinity and the pre-stage horizon), and its fair-share ``project`` key
    (empty: the account's personal project; :mod:`.fairtree`)."""
    return JobRequest(
        job_id=job_id, account=str(account), submitted_at=submitted_at_s,
        gpus_per_node=job.gpus_per_node, nodes=job.nodes, time_limit_s=job.time_limit_s,
        gpu_models=tuple(job.gpu_models or ()), gpu_memory_mib=job.gpu_memory_mib, cpus=job.cpus,
        memory_mib=job.memory_mib, needs_runtime=job.needs_runtime, priority_boost=job.priority_boost,
        mixed_models=job.mixed_models,
        predicted_runtime_s=predicted_runtime_s, inputs=inputs, input_bytes=input_bytes, project=project,
    )
