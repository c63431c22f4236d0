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
from dataclasses import dataclass, field
from pathlib import Path

JOB_MOUNT = "/job"
# host-only variables that must not replace the image's own
_HOST_ONLY = {"PATH", "HOME"}


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
) -> Launch:
    """The launch for ``command`` inside ``image`` with the first runtime found.

    The job dir is mounted at ``/job`` and is the working directory; the
    job's variables are passed by name (``-e KEY``), so their values never
    appear in a process listing. ``gpu_indices`` name the leased GPUs as
    NVIDIA's container toolkit takes them: UUIDs (preferred) or indices.
    The container runs as ``slot_user`` (``uid:gid`` or the shim's
    placeholder), else ``user`` (uid, gid), by default the agent's own.
    ``network`` (``egress``/``none``; None: not sandboxed, as before) adds
    the sandbox's rules (module docstring). Raises :class:`ContainerError`.
    """
    keys = sorted(k for k in env if k not in _HOST_ONLY)
    if "docker" in runtimes or "podman" in runtimes:
        runtime = "docker" if "docker" in runtimes else "podman"
        argv = [
            runtime, "run", "--rm", "--init", "--name", name,
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
        argv += [image, "/bin/sh", "-c", command]
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
