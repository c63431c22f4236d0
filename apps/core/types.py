"""Typed values shared by the layers: what a job asks of the pool."""
from __future__ import annotations

from dataclasses import dataclass

MAX_GPUS_PER_NODE = 1024  # a sanity bound; what the pool really has is checked at submit
MAX_NODES = 256


@dataclass(frozen=True, slots=True)
class ComputeRequest:
    """A job's compute request (SPEC §2, the spec's ``compute`` part), typed and in the server's units.

    ``gpus`` per node on ``nodes`` nodes; ``gpu_models`` empty means any model; ``gpu_memory_mib``
    (per GPU), ``cpus`` and ``memory_mib`` (per node) are minimums, 0 when not asked;
    ``time_limit_s`` in seconds. Built from a validated spec by :func:`apps.jobs.spec.compute_request`.
    """

    gpus: int
    nodes: int = 1
    gpu_models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    cpus: int = 0
    memory_mib: int = 0
    time_limit_s: int = 0

    @property
    def gpus_total(self) -> int:
        """GPUs over all nodes."""
        return self.gpus * self.nodes
