"""Which GPUs and nodes can hold a job."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from apps.core.units import mib_to_gb

from .types import GpuSlot, JobRequest, NodeView


def model_matches(wanted: str, model: str) -> bool:
    """True if the node's GPU ``model`` is the ``wanted`` one or of its family.

    ``H100`` matches ``H100-80GB``; ``A100-80GB`` matches only itself.
    Case does not matter.
    """
    wanted, model = wanted.strip().lower(), model.lower()
    return model == wanted or model.startswith(wanted + "-")


def one_kind(job: JobRequest) -> bool:
    """True if ``job`` is a gang that must sit on GPUs of one model: more than one node, no
    ``gpu_models`` named and ``mixed_models`` not asked (SPEC §5). The core tries such a gang once
    per model of the pool (:meth:`~.pool.Pool.kinds`), each trial limited by ``only_model``."""
    return job.nodes > 1 and not job.gpu_models and not job.mixed_models and not job.only_model


def gpu_fits(job: JobRequest, gpu: GpuSlot) -> bool:
    """True if ``gpu`` is of a model and memory the job accepts."""
    if job.only_model and gpu.model != job.only_model:
        return False
    if job.gpu_models and not any(model_matches(w, gpu.model) for w in job.gpu_models):
        return False
    return gpu.memory_mib >= job.gpu_memory_mib


def node_could_ever_hold(job: JobRequest, node: NodeView) -> bool:
    """True if ``node``, empty, has what one rank of ``job`` asks for (whatever its state)."""
    if job.needs_runtime and not node.runtimes:
        return False
    if job.cpus and node.cpus_total < job.cpus:
        return False
    if job.memory_mib and node.memory_total_mib < job.memory_mib:
        return False
    return sum(1 for g in node.gpus if gpu_fits(job, g)) >= job.gpus_per_node


def model_trials(job: JobRequest, models: Iterable[str]) -> list[JobRequest]:
    """``job`` as the core tries it: a gang of one kind (:func:`one_kind`) once per GPU model in
    ``models`` (distinct, in name order), each trial limited to that model (``only_model``);
    any other job as it is, alone."""
    if not one_kind(job):
        return [job]
    return [dataclasses.replace(job, only_model=m) for m in sorted(set(models))]


def nodes_able(job: JobRequest, nodes: Sequence[NodeView]) -> int:
    """How many of ``nodes`` could ever hold one rank of ``job`` (:func:`node_could_ever_hold`); for a
    gang of one kind, the most of one GPU model (0 when none)."""
    models = {g.model for n in nodes for g in n.gpus}
    return max((sum(1 for n in nodes if node_could_ever_hold(trial, n))
                for trial in model_trials(job, models)), default=0)


def free_fitting_gpus(job: JobRequest, node: NodeView, now: float) -> list[GpuSlot]:
    """GPUs of ``node`` free at ``now`` that the job accepts, lowest id first."""
    return sorted((g for g in node.gpus if g.free_at <= now and gpu_fits(job, g)), key=lambda g: g.gpu_id)


def describe_request(job: JobRequest) -> str:
    """Plain words for what a job waits for: ``8 H100 on one node``."""
    models = " or ".join(job.gpu_models) if job.gpu_models else "GPUs"
    plural = "s" if job.gpus_per_node != 1 else ""
    what = f"{job.gpus_per_node} {models}" if job.gpu_models else f"{job.gpus_per_node} GPU{plural}"
    if job.gpu_models and job.gpus_per_node == 1:
        what = f"1 {models}"
    if job.gpu_memory_mib:
        what += f" of {mib_to_gb(job.gpu_memory_mib):g} GB or more"
    where = "on one node" if job.nodes == 1 else f"on each of {job.nodes} nodes"
    return f"{what} {where}"


def cache_affinity(job: JobRequest, node: NodeView) -> int:
    """How many of ``job``'s inputs ``node``'s cache already holds (0 when the job has none or the
    node reported nothing). Both sides are input identities (``e31_protocol.inputs.input_identity``:
    an upload scoped by its owner, a URL by its credentials), so a node holding another tenant's
    copy of the same bytes counts nothing. A tie-break only: among equally good placements the core prefers the
    node with the higher count, so a job starts where its data already is (issue 14 item 5)."""
    if not job.inputs or not node.cached:
        return 0
    return sum(1 for key in set(job.inputs) if key in node.cached)
