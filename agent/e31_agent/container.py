"""Wrapping a job's command in its container image (``spec.work.image``).

docker and podman run the container detached from the agent's process tree,
so a stop also removes it by name (``teardown``); apptainer runs it as an
ordinary child in the job's process group.
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
) -> Launch:
    """The launch for ``command`` inside ``image`` with the first runtime found.

    The job dir is mounted at ``/job`` and is the working directory; the
    job's variables are passed by name (``-e KEY``), so their values never
    appear in a process listing. ``gpu_indices`` name the leased GPUs as
    NVIDIA's container toolkit takes them: UUIDs (preferred) or indices.
    The container runs as ``user`` (uid, gid), by default the agent's own.
    Raises :class:`ContainerError`.
    """
    keys = sorted(k for k in env if k not in _HOST_ONLY)
    if "docker" in runtimes or "podman" in runtimes:
        runtime = "docker" if "docker" in runtimes else "podman"
        argv = [
            runtime, "run", "--rm", "--init", "--name", name,
            "--user", "{}:{}".format(*(user or (os.getuid(), os.getgid()))),
            "-v", f"{job_dir}:{JOB_MOUNT}", "-w", JOB_MOUNT, "-e", f"HOME={JOB_MOUNT}",
        ]  # fmt: skip
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
        argv += ["-B", f"{job_dir}:{JOB_MOUNT}"]
        if real_gpus and gpu_indices:
            argv.append("--nv")
        argv += [ref, "/bin/sh", "-c", command]
        extra = {f"APPTAINERENV_{k}": env[k] for k in keys}
        extra["APPTAINERENV_HOME"] = JOB_MOUNT
        return Launch(argv=argv, env=extra)
    raise ContainerError(f"image {image!r} needs docker, podman or apptainer; this node has none")
