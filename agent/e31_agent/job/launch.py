"""Step 3, launch: start the command under its shim, with its environment, container, sandbox
and limits (:mod:`e31_agent.runner`, :mod:`e31_agent.shim`)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e31_protocol import ReportType

from .. import container, gangnet, images
from ..cgroups import JobCgroups
from ..models import Assignment
from ..packer import HOSTFILE
from ..reports import Reporter
from ..runner import JobProcess, build_env, new_marker
from ..sandbox import JOB_MOUNT, SLOT_PLACEHOLDER, Sandbox, gpu_device_nodes

log = logging.getLogger(__name__)

BACKSTOP_S = 1.0  # the shim sends its SIGTERM this long after the agent's (SIGKILL 1 s past the deadline)


@dataclass(frozen=True)
class LaunchJob:
    """What the launch is handed: the assignment (command, image, env, GPUs, limits from the
    spec), the node's means to run it (container runtimes, real GPUs or simulated, the tenant
    sandbox, per-job cgroups, the node's ``limits``, the job's user when the agent is root) and
    where the shim writes (the attempt's log and state dir).

    ``scope``: the workdir's short id (:attr:`~e31_agent.config.Workdir.scope`), marking the
    job's processes; ``limits``: ``nofile``, ``memory`` (simulated nodes), ``beat_path``,
    ``loss_timeout_s`` (see :func:`job_limits`); ``sandbox`` None: ``--unsafe-no-sandbox``.
    """

    assignment: Assignment
    scope: str
    log_path: Path
    run_dir: Path
    runtimes: list[str]
    real_gpus: bool
    limits: dict[str, Any] = field(default_factory=dict)
    job_user: tuple[int, int] | None = None
    cgroups: JobCgroups | None = None
    sandbox: Sandbox | None = None


def secret_env_split(env: dict[str, str], secret_names: set[str]) -> dict[str, str]:
    """Take the secrets' values out of ``env`` (they go to the shim by pipe, never into a file or an
    argv); returns them. A secret is under its name, or as apptainer's runtime passes it
    (``APPTAINERENV_NAME``); a secret whose own name starts with the prefix is matched whole."""
    prefix = "APPTAINERENV_"
    return {k: env.pop(k) for k in list(env)
            if k in secret_names or (k.startswith(prefix) and k[len(prefix):] in secret_names)}


def start_process(job: LaunchJob, job_dir: Path) -> JobProcess:
    """Start ``job``'s command in ``job_dir``; returns the started process.

    Raises:
        OSError: the shim could not be started.
        container.ContainerError: the spec names an image and no runtime can run it.
    """
    a = job.assignment
    marker = new_marker(job.scope, a.job_id, a.attempt)
    pinned = a.gpu_uuids if a.gpu_uuids and all(a.gpu_uuids) else a.gpu_indices
    env = build_env(
        job_dir=job_dir,
        spec_env=a.spec.env,
        assignment_env=a.env,
        gpus=pinned,
        marker=marker,
    )
    gang_plan = gang_network(job)
    if gang_plan is not None and a.gang_net is not None:  # the ranks meet on the gang's own addresses
        env.update({"E31_MASTER_ADDR": a.gang_net.master, "MASTER_ADDR": a.gang_net.master})
    if a.gang:  # in the job dir as the command sees it: /job in the sandbox and in a container
        inner = JOB_MOUNT if job.sandbox is not None or a.spec.image else str(job_dir)
        hosts = ([(addr, gpus) for addr, (_, gpus) in zip(a.gang_net.addresses, a.gang, strict=False)]
                 if gang_plan is not None and a.gang_net is not None else a.gang)
        env["E31_HOSTFILE"] = f"{inner}/{hostfile_write(job_dir, hosts)}"
    # work.secrets: their names reach the runtime (-e NAME), their values only the shim's pipe; one that
    # would replace a variable the agent sets (E31_JOB_ID, the marker...) is left out
    secret_names = {k for k in a.secrets if k not in env}
    env.update({k: a.secrets[k] for k in secret_names})
    if a.spec.image:
        launch = container.wrap(
            image=a.spec.image,
            command=a.spec.command,
            runtimes=job.runtimes,
            job_dir=job_dir,
            env=env,
            gpu_indices=list(pinned),
            real_gpus=job.real_gpus,
            name=f"e31-{job.scope}-{a.job_id}-{a.attempt}",
            user=job.job_user,
            slot_user=SLOT_PLACEHOLDER if job.sandbox is not None and job.sandbox.slots else None,
            network=a.spec.network if job.sandbox is not None else None,
            nofile=job.limits.get("nofile"),
        )
    else:
        launch = container.plain(a.spec.command)
    env.update(launch.env)
    secret_env = secret_env_split(env, secret_names)
    limits = job_limits(a, job.limits, job.job_user, cgroup=run_cgroup(job))
    if job.sandbox is not None:
        nodes = gpu_device_nodes(a.gpu_uuids, a.gpu_indices) if job.real_gpus and a.gpu_indices else []
        if gang_plan is not None:  # a gang rank also gets the node's RDMA devices (InfiniBand verbs)
            nodes += gangnet.rdma_device_nodes()
        limits["sandbox"] = job.sandbox.plan(job_dir=job_dir, network=a.spec.network, gpu_nodes=nodes,
                                             image=bool(a.spec.image), gang_net=gang_plan)
    return JobProcess.start(
        launch.argv,
        cwd=job_dir,
        env=env,
        log_path=job.log_path,
        run_dir=job.run_dir,
        teardown=launch.teardown,
        limits=limits,
        secret_env=secret_env,
    )


def pull_image(job: LaunchJob, reporter: Reporter) -> str | None:
    """Pull the assignment's image before the launch, with its ``work.image_credentials`` login
    (:mod:`e31_agent.images`; the staging report says so while it pulls), unless the node holds it
    and the registry has let this login, or anyone, pull it (:data:`e31_agent.images.PULLED`: a held
    private image is no right to run it); returns why the attempt must not start ("image pull
    failed: ..."), or None. Apptainer pulls at its own start."""
    a = job.assignment
    runtime = container.pull_runtime(job.runtimes)
    if runtime is None or not a.spec.image:
        return None
    login = None
    if a.spec.image_credentials:
        login = images.registry_login(a.credentials.get(a.spec.image_credentials))
        if login is None:
            return f"image pull failed: secret {a.spec.image_credentials} is not a registry login"
    def announce(words: str) -> None:
        reporter.send(ReportType.STAGING, bytes_done=0, bytes_total=None, bytes_fetched=0, bytes_cached=0,
                      message=words)

    try:
        images.pull_unless_entitled(runtime, a.spec.image, login=login, scratch_dir=job.run_dir, announce=announce)
    except images.ImagePullError as exc:
        log.warning("%s: %s", a.ref, exc)
        return str(exc)
    return None


def gang_network(job: LaunchJob) -> dict[str, Any] | None:
    """The shim's plan for this rank's ``gang0`` (:func:`e31_agent.gangnet.plan`), or None where
    the attempt has one node, runs in a container image, or this node cannot build it (not root,
    no sandbox): then the ranks meet, if at all, on the hosts' names, as before issue 24."""
    a = job.assignment
    if a.gang_net is None or job.sandbox is None or a.spec.image or not gangnet.available():
        if a.gang_net is not None:
            log.warning("%s: no gang network on this node (needs root and the sandbox; no container image)", a.ref)
        return None
    rank = int(a.env.get("E31_NODE_RANK") or 0)
    if rank >= len(a.gang_net.addresses):
        return None
    return gangnet.plan(a.gang_net, rank=rank, hosts=[host for host, _ in a.gang])


def hostfile_write(job_dir: Path, gang: list[tuple[str, int]]) -> str:
    """Write the gang's MPI hostfile (``host slots=GPUs``, one line per node, rank 0 first) into
    ``job_dir``; returns its name there (:data:`~e31_agent.packer.HOSTFILE`, never packed as an
    output). Raises ``OSError``."""
    path = job_dir / HOSTFILE
    path.write_text("".join(f"{host} slots={gpus}\n" for host, gpus in gang))
    path.chmod(0o644)
    return HOSTFILE


def run_cgroup(job: LaunchJob) -> Path | None:
    """``job``'s cgroup with ``memory.max`` from the spec, when the node can make one."""
    a = job.assignment
    if job.cgroups is None or not a.memory_bytes:
        return None
    try:
        return job.cgroups.create(f"job-{a.job_id}-{a.attempt}", a.memory_bytes)
    except OSError as exc:
        log.warning("%s: no cgroup for the memory limit: %s", a.ref, exc)
        return None


def job_limits(
    assignment: Assignment,
    node_limits: dict[str, Any],
    job_user: tuple[int, int] | None,
    *,
    cgroup: Path | None = None,
) -> dict[str, Any]:
    """What the shim applies to the command (see :mod:`e31_agent.shim`).

    ``cpus``: the first ``spec.compute.cpus`` CPU ids this agent may use
    (``sched_setaffinity``); ``cgroup``: the run's cgroup v2 dir, whose
    ``memory.max`` is ``spec.compute.memory_gb``; without one, on simulated
    nodes (``node_limits["memory"]``), ``memory_bytes``: the same figure as
    ``RLIMIT_AS`` (address space; not on real GPUs, where CUDA maps far more
    than it touches); ``nofile``: the node's ``RLIMIT_NOFILE`` for jobs;
    ``uid``/``gid``: the unprivileged user when the agent is root;
    ``stop_at`` (epoch s) and ``grace_s``: the shim stops the run itself
    ``BACKSTOP_S`` after the agent should have (a frozen or dead agent): SIGTERM at
    ``deadline - grace_s + BACKSTOP_S``, SIGKILL ``BACKSTOP_S`` past the deadline;
    ``beat_path`` and ``loss_timeout_s`` when given: the shim stops the run when the
    agent has not heard from the server for the node-loss timeout (see the shim).
    """
    limits: dict[str, Any] = {}
    if assignment.cpus:
        try:
            allowed = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            allowed = []
        if allowed and assignment.cpus < len(allowed):
            limits["cpus"] = allowed[: assignment.cpus]
    if cgroup is not None:
        limits["cgroup"] = str(cgroup)
    elif assignment.memory_bytes and node_limits.get("memory"):
        limits["memory_bytes"] = assignment.memory_bytes
    if node_limits.get("nofile"):
        limits["nofile"] = int(node_limits["nofile"])
    if job_user is not None:
        limits["uid"], limits["gid"] = job_user
    if node_limits.get("beat_path") and node_limits.get("loss_timeout_s"):
        limits["beat_path"] = str(node_limits["beat_path"])
        limits["loss_timeout_s"] = float(node_limits["loss_timeout_s"])
    # the shim's own backstop: a few seconds after the agent would have stopped the run
    limits["stop_at"] = time.time() + (assignment.term_at - time.monotonic()) + BACKSTOP_S
    limits["grace_s"] = assignment.grace_s
    return limits
