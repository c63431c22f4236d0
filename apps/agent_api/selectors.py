"""Reads for the agents' protocol: the work answer, what a node must stop, what it may fetch
(docs/agent-protocol.md)."""
from __future__ import annotations

import hashlib
import ipaddress
from datetime import datetime
from typing import Any

from django.conf import settings

from apps.agent_api.models import AgentReport
from apps.artifacts.models import Upload, upload_jobs_q
from apps.core import clock
from apps.core.choices import JobState
from apps.jobs.checkpoints import checkpoint_for, checkpoint_path
from apps.jobs.inputs import input_scope
from apps.jobs.prestage import node_may_prestage_upload, prestage_offers
from apps.jobs.secret_refs import job_secrets_open
from apps.metering.selectors import attempt_leases, leases_on, leases_open_on
from apps.pool.models import Node


def agent_work_for(node: Node, now: datetime | None = None) -> dict[str, list[dict[str, Any]]]:
    """Assignments not yet accepted, cancels pending, and queued jobs' inputs to pre-stage for ``node``
    (docs/agent-protocol.md)."""
    now = now or clock.now()
    leases = list(leases_open_on(node).select_related("job", "job__array").prefetch_related("lease_gpus__gpu"))
    assignments, cancel = [], []
    for lease in leases:
        job = lease.job
        if lease.attempt != job.attempt:
            continue
        if job.cancel_requested_at or lease.run_ended_at:
            if job.cancel_requested_at and lease.run_ended_at is None:
                cancel.append({"job_id": job.pk, "attempt": lease.attempt})
            if lease.accepted_at or lease.run_ended_at:
                continue
        if lease.accepted_at is None and job.state in (JobState.RENTED, JobState.RUNNING):
            assignments.append(_assignment(lease, now))
    return {"assignments": assignments, "cancel": cancel, "prestage": prestage_offers(node)}


def node_may_fetch_upload(node: Node, upload: Upload) -> bool:
    """True when ``node`` holds an open lease of, or pre-stages, a job that may use the upload (its
    owner's, or its project's: :func:`apps.artifacts.models.upload_jobs_q`) naming it.

    Anything else answers 404: a node token reads no other input.
    """
    specs = leases_open_on(node).filter(upload_jobs_q(upload, "job__")).values_list("job__spec", flat=True)
    if any(item.get("source") == upload.source for spec in specs for item in spec.get("data") or []):
        return True
    return node_may_prestage_upload(node, upload)


def _assignment(lease: Any, now: datetime) -> dict[str, Any]:
    """The assignment of ``lease`` (an open lease row of :func:`leases_open_on`, its job and GPUs read)."""
    job = lease.job
    gpus = sorted((lg.gpu for lg in lease.lease_gpus.all()), key=lambda g: g.index)
    ranks = attempt_leases(job_id=job.pk, attempt=lease.attempt)
    master = ranks[0].node.hostname or ranks[0].node.name
    deadline = lease.rented_at.timestamp() + job.time_limit_s - now.timestamp()
    # Issue 23: the values of the secrets the spec names go to this node only, because it holds
    # this attempt (the caller's lease); nothing else the server sends or shows carries them.
    env_secrets, credentials, refused = job_secrets_open(owner_id=job.owner_id, spec=job.spec,
                                                         project_id=job.project_id)
    extra: dict[str, Any] = {}
    if env_secrets:
        extra["secrets"] = env_secrets
    if credentials:
        extra["credentials"] = credentials
    if refused:  # deleted since the submit: the agent fails the attempt at its start, unbilled
        extra["start_refused"] = refused
    root = checkpoint_path(job.spec)
    if root:  # issue 24 item 5: packed at the attempt's end; put back before the run from the newest version
        version = checkpoint_for(job, attempt=lease.attempt, rank=lease.node_rank)
        extra["checkpoint"] = {"path": root, "attempt": version.attempt if version else None,
                               "files": version.files if version else []}
    return extra | {
        "job_id": job.pk,
        "attempt": lease.attempt,
        "lease_id": lease.pk,
        "gpus": [{"index": g.index, "uuid": g.uuid} for g in gpus],
        "time_limit_s": job.time_limit_s,
        "deadline_in_s": round(max(0.0, deadline), 3),
        "grace_s": grace_inside_limit(job.time_limit_s),
        "env": gang_env(job_id=job.pk, attempt=lease.attempt, node_rank=lease.node_rank, nodes=job.nodes,
                        gpus_per_node=job.gpus_per_node, master=master),
        # the gang's nodes, rank 0 first: the agent writes them as an MPI hostfile (E31_HOSTFILE)
        "gang": [{"rank": r.node_rank, "host": r.node.hostname or r.node.name, "gpus": r.gpu_count} for r in ranks],
        **({"gang_net": gang_network(job_id=job.pk, attempt=lease.attempt, nodes=job.nodes)} if job.nodes > 1 else {}),
        "spec": job.spec,
        # whose inputs these are, for the node's cache (protocol v4, e31_protocol.inputs)
        "input_scope": input_scope(owner_id=job.owner_id, data=job.spec.get("data")),
        "output_max_bytes": settings.E31_BUNDLE_MAX_BYTES,
        # A task of a job array: the agent sets E31_ARRAY_INDEX and E31_ARRAY_SIZE from these.
        "array_index": job.array_index,
        "array_size": job.array.size if job.array_id is not None else None,
    }


GANG_PORT_BASE = 29500  # the rendezvous port of a gang: in its range, by job (PyTorch's default first)
GANG_PORT_SPAN = 1000


def gang_env(*, job_id: int, attempt: int, node_rank: int, nodes: int, gpus_per_node: int,
             master: str) -> dict[str, str]:
    """The environment every launcher reads (SPEC §6), for node rank ``node_rank`` of an attempt of
    ``nodes`` nodes x ``gpus_per_node`` GPUs whose rank 0 is at ``master``: ``E31_*`` and the names
    ``torchrun`` and ``torch.distributed`` read (``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``,
    ``NODE_RANK``, ``WORLD_SIZE``: GPUs in the gang). The port is ``GANG_PORT_BASE`` +
    ``job_id`` mod ``GANG_PORT_SPAN``, the same on every rank and every attempt."""
    port = str(GANG_PORT_BASE + job_id % GANG_PORT_SPAN)
    world = str(nodes * gpus_per_node)
    return {
        "E31_JOB_ID": str(job_id), "E31_ATTEMPT": str(attempt),
        "E31_NODE_RANK": str(node_rank), "E31_NUM_NODES": str(nodes), "E31_GPUS_PER_NODE": str(gpus_per_node),
        "E31_WORLD_SIZE": world, "E31_MASTER_ADDR": master, "E31_MASTER_PORT": port,
        "MASTER_ADDR": master, "MASTER_PORT": port, "NNODES": str(nodes), "NODE_RANK": str(node_rank),
        "WORLD_SIZE": world,
    }


GANG_SUBNET = ipaddress.IPv4Network("10.231.0.0/16")  # inside each rank's sandbox only: one gang's ranks
VNI_JOB_BITS = 20  # a VXLAN id (24 bits): the job id's low 20 bits, then the attempt's low 4


def gang_network(*, job_id: int, attempt: int, nodes: int) -> dict[str, Any]:
    """The network of a multi-node attempt (SPEC §6, issue 24 item 1), for every rank's agent:
    ``name`` (8 hex, a keyed hash of the site, job and attempt: the host's bridge of this attempt
    alone, also where two sites share hosts), ``vni`` (the VXLAN id that joins its ranks across
    hosts: distinct for any two attempts of 2**20 consecutive jobs), ``prefix`` (bits) and
    ``addresses`` (rank r at ``10.231.0.0/16`` host r + 1: the addresses exist only on the gang's
    interfaces, so every gang may use the same range)."""
    key = f"e31-gang:{settings.SECRET_KEY}:{job_id}:{attempt}".encode()
    vni = ((job_id % 2**VNI_JOB_BITS) << 4) | (attempt % 16)
    return {"name": hashlib.sha256(key).hexdigest()[:8], "vni": vni or 1, "prefix": GANG_SUBNET.prefixlen,
            "addresses": [str(GANG_SUBNET[rank + 1]) for rank in range(nodes)]}


def ended_attempts(node: Node, listed: set[tuple[int, int]]) -> list[dict[str, int]]:
    """Fencing: of the attempts ``node``'s agent says it holds (``listed``: ``(job_id, attempt)``
    from a heartbeat's ``running`` or a work poll's ``have``), those the server has ended on its
    own (time limit enforced by the server, node loss, requeue) or never knew: the agent must
    stop them. An attempt whose agent sent ``finished`` is not one (it is finishing up).
    Shape: ``[{"job_id", "attempt"}]``, merged into the answer's ``cancel`` list.
    """
    if not listed:
        return []
    current = {(j, a) for j, a, current in leases_open_on(node).filter(
        job_id__in={j for j, _ in listed}).values_list("job_id", "attempt", "job__attempt") if a == current}
    finished = set(AgentReport.objects.filter(
        job_id__in={j for j, _ in listed}, type="finished",
        node_rank__in=leases_on(node).filter(job_id__in={j for j, _ in listed}).values("node_rank"))
        .values_list("job_id", "attempt"))
    return [{"job_id": j, "attempt": a} for j, a in sorted(listed) if (j, a) not in current | finished]


def grace_inside_limit(time_limit_s: int) -> float:
    """The SIGTERM-to-SIGKILL grace of a run (seconds): ``E31_GRACE_S``, but at most 10 % of the
    time limit, so the agent's SIGTERM at ``deadline - grace`` makes SIGKILL land at the limit."""
    return round(min(float(settings.E31_GRACE_S), 0.1 * time_limit_s), 3)


def running_on(node: Node) -> list[dict[str, int]]:
    """The (job, attempt) pairs the server believes hold GPUs on ``node``."""
    return [{"job_id": j, "attempt": a} for j, a in
            leases_open_on(node).values_list("job_id", "attempt")]


def gang_stops_for(node: Node) -> list[dict[str, int]]:
    """Attempts of multi-node jobs that ``node`` must stop: the run ended on another rank (it
    failed, exited or was cancelled: the gang ends as one, SPEC §3), this node's agent has not
    reported its own ``exited`` yet. Shape: ``[{"job_id", "attempt"}]``, merged into the
    ``cancel`` list of the work and heartbeat answers.
    """
    stops = []
    for lease in leases_open_on(node).filter(run_ended_at__isnull=False, accepted_at__isnull=False,
                                             job__nodes__gt=1).select_related("job"):
        if lease.attempt != lease.job.attempt:
            continue
        if not AgentReport.objects.filter(job_id=lease.job_id, attempt=lease.attempt, node_rank=lease.node_rank,
                                          type__in=("exited", "finished")).exists():  # finished: folded exited
            stops.append({"job_id": lease.job_id, "attempt": lease.attempt})
    return stops


def work_with_gang_stops(node: Node) -> dict[str, list[dict]]:
    """:func:`agent_work_for`, its ``cancel`` list joined by the gang ranks to stop (:func:`gang_stops_for`)."""
    work = agent_work_for(node)
    for ref in gang_stops_for(node):
        if ref not in work["cancel"]:
            work["cancel"].append(ref)
    return work
