"""Wrapping a job's command in its container image (``spec.work.image``).

docker and podman run the container detached from the agent's process tree,
so a stop also removes it by name (``teardown``); apptainer runs it as an
ordinary child in the job's process group.

Under the tenant sandbox (:mod:`e31_agent.sandbox`; ``network`` given) the
runtime itself runs outside bubblewrap (it needs its daemon or its own
namespaces), and the container gets the sandbox's rules as far as the
runtime can give them: the attempt's slot user (``slot_user``: the shim
puts the uid and gid in), no capabilities, ``no-new-privileges``, private
``/tmp``, IPC and PID namespaces, only the job dir mounted, and the network
of ``work.network`` (``none``: no network; ``egress``: podman's slirp4netns
without the host's loopback, docker's default bridge).
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass, field
from pathlib import Path

JOB_MOUNT = "/job"
# host-only variables that must not replace the image's own
_HOST_ONLY = {"PATH", "HOME"}


JOB_NPROC = 4096  # processes (and threads) a container's user may have: the per-attempt pids cap
# podman's OCI runtime: Debian's podman defaults to crun, which refuses cgroup v1 hosts with a v2
# mount (hybrid); runc runs there and everywhere else. E31_PODMAN_RUNTIME names another.
PODMAN_RUNTIME_ENV = "E31_PODMAN_RUNTIME"


def pull_runtime(runtimes: list[str]) -> str | None:
    """The runtime :func:`wrap` uses that pulls images itself before a run (docker, else podman),
    or None (apptainer pulls at its start; no runtime: the launch refuses the job)."""
    return "docker" if "docker" in runtimes else "podman" if "podman" in runtimes else None


def podman_runtime() -> str | None:
    """The OCI runtime podman is told to use: ``E31_PODMAN_RUNTIME``, else ``runc`` when installed."""
    return os.environ.get(PODMAN_RUNTIME_ENV) or ("runc" if shutil.which("runc") else None)


def ulimit_args(nofile: int | None, nproc: int = JOB_NPROC) -> list[str]:
    """``--ulimit`` flags with explicit soft and hard values, each at most the agent's own hard
    limit: the runtimes' defaults (a hard ``nofile`` above the host's) make runc refuse to start."""
    args = []
    for name, kind, want in (("nofile", resource.RLIMIT_NOFILE, nofile or 1024),
                             ("nproc", resource.RLIMIT_NPROC, nproc)):
        hard = resource.getrlimit(kind)[1]
        value = want if hard == resource.RLIM_INFINITY else min(want, hard)
        args += ["--ulimit", f"{name}={value}:{value}"]
    return args


# The stop's grace inside a container (issue 24 item 4), as the job's init gives it in the sandbox
# (e31_agent.jobinit): the image's init (podman's and docker's --init) passes a SIGTERM to its one
# child only, so a shell that traps nothing died at once and took the container, and every saver in
# it, down. This POSIX sh runs the command and, on SIGTERM, sends it on to every process of the
# container (kill -1: all but init and itself) and waits until none is left; the SIGKILL after the
# grace comes from outside. $0 is the command.
GRACE_WRAPPER = ('sh -c "$0" & c=$!; '
                 'trap "kill -TERM -1 2>/dev/null; while kill -0 -1 2>/dev/null; do sleep 0.1; done; exit 143" TERM; '
                 'wait $c; r=$?; exit $r')


class ContainerError(Exception):
    """The job needs an image but the node cannot run one."""


@dataclass(frozen=True)
class Launch:
    """What to start: argv, extra environment for it, and the teardown argv."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    teardown: list[str] | None = None


def plain(command: str) -> Launch:
    """No image: ``/bin/sh -c COMMAND`` on the host."""
    return Launch(argv=["/bin/sh", "-c", command])


def wrap(
    *,
    image: str,
    command: str,
    runtimes: list[str],
    job_dir: Path,
    env: dict[str, str],
    gpu_indices: list[int | str],
    real_gpus: bool,
    name: str,
    user: tuple[int, int] | None = None,
    slot_user: str | None = None,
    network: str | None = None,
    nofile: int | None = None,
) -> Launch:
    """The launch for ``command`` inside ``image`` with the first runtime found.

    The job dir is mounted at ``/job`` and is the working directory; the
    job's variables are passed by name (``-e KEY``), so their values never
    appear in a process listing. ``gpu_indices`` name the leased GPUs as
    NVIDIA's container toolkit takes them: UUIDs (preferred) or indices.
    The container runs as ``slot_user`` (``uid:gid`` or the shim's
    placeholder), else ``user`` (uid, gid), by default the agent's own.
    ``network`` (``egress``/``none``; None: not sandboxed, as before) adds
    the sandbox's rules (module docstring). ``nofile``: the job's open-file limit (podman and
    docker get it and the pids cap :data:`JOB_NPROC` as explicit ``--ulimit`` values; podman runs
    under :func:`podman_runtime`). The image was pulled before (:mod:`e31_agent.images`): the run
    never pulls (``--pull=never``). Raises :class:`ContainerError`.
    """
    keys = sorted(k for k in env if k not in _HOST_ONLY)
    if "docker" in runtimes or "podman" in runtimes:
        runtime = "docker" if "docker" in runtimes else "podman"
        oci = podman_runtime() if runtime == "podman" else None
        argv = [
            runtime, "run", *(["--runtime", oci] if oci else []), "--rm", "--init", "--pull=never", "--name", name,
            *ulimit_args(nofile),
            "--user", slot_user or "{}:{}".format(*(user or (os.getuid(), os.getgid()))),
            "-v", f"{job_dir}:{JOB_MOUNT}", "-w", JOB_MOUNT, "-e", f"HOME={JOB_MOUNT}",
        ]  # fmt: skip
        if network is not None:
            argv += ["--cap-drop=ALL", "--security-opt=no-new-privileges", "--ipc=private",
                     "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
            if network == "none":
                argv.append("--network=none")
            elif runtime == "podman":
                argv.append("--network=slirp4netns:allow_host_loopback=false")
        extra: dict[str, str] = {}
        if real_gpus and gpu_indices:
            if runtime == "docker":
                argv += ["--gpus", "device=" + ",".join(str(i) for i in gpu_indices)]
            else:
                for index in gpu_indices:
                    argv += ["--device", f"nvidia.com/gpu={index}"]
            # inside, the leased GPUs are renumbered from 0
            extra["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpu_indices)))
        for key in keys:
            argv += ["-e", key]
        argv += [image, "/bin/sh", "-c", GRACE_WRAPPER, command]
        return Launch(argv=argv, env=extra, teardown=[runtime, "rm", "-f", name])
    if "apptainer" in runtimes:
        ref = image if "://" in image or image.endswith(".sif") else f"docker://{image}"
        argv = ["apptainer", "exec", "--cleanenv", "--pwd", JOB_MOUNT]
        if network is not None:
            argv += ["--containall", "--no-privs", "--no-home", "--ipc", "--pid"]
            if network == "none":
                argv += ["--net", "--network", "none"]
            if slot_user:  # apptainer runs unprivileged as the slot user (its own user namespace)
                uid, gid = slot_user.split(":", 1)
                argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", *argv]
        argv += ["-B", f"{job_dir}:{JOB_MOUNT}"]
        if real_gpus and gpu_indices:
            argv.append("--nv")
        argv += [ref, "/bin/sh", "-c", command]
        extra = {f"APPTAINERENV_{k}": env[k] for k in keys}
        extra["APPTAINERENV_HOME"] = JOB_MOUNT
        return Launch(argv=argv, env=extra)
    raise ContainerError(f"image {image!r} needs docker, podman or apptainer; this node has none")
