"""What the node has: GPUs (NVML or ``--simulate``), CPUs, memory, disk, runtimes;
and how its GPUs are doing (:func:`gpu_health`, sent with every heartbeat)."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psutil
from e31_protocol import HealthSource, payloads

from . import __version__
from .models import GpuInfo, Inventory

log = logging.getLogger(__name__)

RUNTIMES = ("docker", "podman", "apptainer")

# Nominal memory sizes (GB as sold) that GPUs ship with. NVML reports a bit
# less than the nominal size (ECC, reserved memory: an L40S shows 46068 MiB,
# an H100 80GB 81559 MiB), so the measured size is snapped up to one of these.
NOMINAL_GB = (4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 180, 192, 288)

_VENDOR_WORDS = {"NVIDIA", "GEFORCE", "TESLA", "QUADRO"}
_DROP_WORDS = re.compile(
    r"^(SXM\d*|PCIE|HBM\d*E?|NVL|NVLINK|GENERATION|LAPTOP|GPU|MIG|\d+(\.\d+)?GB)$"
)
_SIM_ITEM = re.compile(
    r"^\s*(?:(\d+)\s*[x*]\s*)?([a-z][a-z0-9 \-]*?)-(\d+)\s*GB\s*$", re.IGNORECASE
)


class SimulateError(ValueError):
    """A ``--simulate`` value that could not be read."""


def nominal_gb(memory_mb: int) -> int:
    """Snap an NVML memory size (MiB) to the nominal GB of the card.

    The smallest nominal size not below the measured GiB minus 0.5; beyond
    the table, the measured GiB rounded.
    """
    gib = memory_mb / 1024
    for size in NOMINAL_GB:
        if size >= gib - 0.5:
            return size
    return round(gib)


def normalise_model(name: str, memory_mb: int | None = None) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"H100-80GB"``.

    The family is the name without vendor, form-factor and memory words,
    joined without spaces (``"NVIDIA GeForce RTX 4090"`` -> ``RTX4090``);
    the memory is NVML's ``memory_mb`` snapped to the nominal size, or, when
    that is unknown, the ``<n>GB`` written in the name.
    """
    words = []
    name_gb: int | None = None
    for word in re.split(r"[\s\-_]+", name.strip().upper()):
        if not word or word in _VENDOR_WORDS:
            continue
        match = re.fullmatch(r"(\d+)GB", word)
        if match:
            name_gb = name_gb or int(match.group(1))
            continue
        if _DROP_WORDS.match(word):
            continue
        words.append(word)
    family = "".join(words) or "GPU"
    gb = nominal_gb(memory_mb) if memory_mb else name_gb
    return f"{family}-{gb}GB" if gb else family


def parse_simulate(value: str) -> list[tuple[int, str, int]]:
    """Read ``"4xH100-80GB"`` or ``"2xA100-40GB,1xL40S-48GB"``.

    Returns ``(count, model, memory_gb)`` per item, the model normalised
    (``h100-80gb`` -> ``H100-80GB``). Raises :class:`SimulateError`.
    """
    items = []
    for part in value.split(","):
        match = _SIM_ITEM.match(part)
        if not match:
            raise SimulateError(
                f"cannot read {part.strip()!r}: expected COUNTxMODEL-MEMGB, like 4xH100-80GB"
            )
        count = int(match.group(1) or 1)
        if count < 1:
            raise SimulateError(f"{part.strip()!r}: the count must be at least 1")
        family = normalise_model(match.group(2))
        gb = int(match.group(3))
        items.append((count, f"{family}-{gb}GB", gb))
    return items


def simulated_gpus(value: str, *, hostname: str, workdir: Path) -> list[GpuInfo]:
    """Fake GPUs from a ``--simulate`` value.

    UUIDs are stable for a (hostname, workdir, index): a restarted agent
    registers the same GPUs, and two agents on one host with different
    workdirs register different ones.
    """
    gpus = []
    index = 0
    for count, model, gb in parse_simulate(value):
        for _ in range(count):
            seed = f"e31-sim|{hostname}|{workdir.resolve()}|{index}"
            fake = uuid.uuid5(uuid.NAMESPACE_URL, seed)
            gpus.append(GpuInfo(index=index, uuid=f"GPU-{fake}", model=model, memory_mb=gb * 1024))
            index += 1
    return gpus


def nvml_gpus() -> list[GpuInfo]:
    """The GPUs NVML sees; an empty list when there is no NVML (no driver)."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("NVML not available (%s): no GPUs", exc)
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            uuid_ = _text(pynvml.nvmlDeviceGetUUID(handle))
            memory_mb = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024))
            gpus.append(GpuInfo(index, uuid_, normalise_model(name, memory_mb), memory_mb))
        return gpus
    finally:
        pynvml.nvmlShutdown()


HEALTH_FIELDS = ("temperature_c", "utilization_pct", "memory_used_mb", "ecc_uncorrected", "ecc_corrected",
                 "processes")


def gpu_health(inventory: Inventory | None) -> payloads.Health:
    """The heartbeat's ``health``: ``{"gpus": [{"uuid", "index", "temperature_c",
    "utilization_pct", "memory_used_mb", "ecc_uncorrected", "ecc_corrected", "processes"}],
    "source": "nvml" | "simulated" | "none"}``.

    From NVML: temperature (GPU die, degrees C), GPU utilisation (percent over
    NVML's last sample period), memory in use (MiB) and volatile ECC error
    counts since the driver loaded (None where the card has no ECC or NVML
    does not say), and the count of compute processes on the GPU (the server
    quarantines a GPU with no lease that has any, or memory in use above idle:
    SPEC §5). Simulated GPUs report fixed, healthy figures so the
    server side can be exercised without a GPU.
    """
    if inventory is None or not inventory.gpus:
        return {"gpus": [], "source": HealthSource.NONE}
    if inventory.simulated:
        return {"source": HealthSource.SIMULATED, "gpus": [
            {"uuid": g.uuid, "index": g.index, "temperature_c": 35, "utilization_pct": 0,
             "memory_used_mb": 0, "ecc_uncorrected": 0, "ecc_corrected": 0, "processes": 0}
            for g in inventory.gpus
        ]}  # fmt: skip
    return {"source": HealthSource.NVML, "gpus": nvml_health()}  # type: ignore[typeddict-item]


def nvml_health() -> list[dict[str, Any]]:
    """Per GPU (by UUID) health from NVML; an empty list without NVML."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []

    def read(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    try:
        out = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            util = read(pynvml.nvmlDeviceGetUtilizationRates, handle)
            mem = read(pynvml.nvmlDeviceGetMemoryInfo, handle)
            procs = read(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
            volatile = getattr(pynvml, "NVML_VOLATILE_ECC", 0)
            out.append({
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "index": index,
                "temperature_c": read(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
                "utilization_pct": util.gpu if util is not None else None,
                "memory_used_mb": int(mem.used // (1024 * 1024)) if mem is not None else None,
                "ecc_uncorrected": read(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile),
                "ecc_corrected": read(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                      pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile),
                "processes": len(procs) if procs is not None else None,
            })  # fmt: skip
        return out
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# How to ask each runtime whether it can run containers now (a docker client
# without a daemon answers ``--version`` but cannot run anything).
# podman's client answers alone (``podman info`` takes seconds: it reads the whole store)
RUNTIME_PROBES = {"docker": ["docker", "info"], "podman": ["podman", "version"], "apptainer": ["apptainer", "version"]}


def runtime_works(name: str, timeout_s: float = 10.0) -> bool:
    """True if ``name`` is on ``PATH`` and its probe (``docker info``...) succeeds within ``timeout_s``."""
    if not shutil.which(name):
        return False
    try:
        probe = subprocess.run(RUNTIME_PROBES.get(name, [name, "--version"]), capture_output=True,
                               timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def container_runtimes() -> list[str]:
    """Container runtimes on ``PATH`` that can run a container now."""
    return [name for name in RUNTIMES if runtime_works(name)]


# the fsspec implementation each cloud scheme needs (the agent's ``cloud`` extra installs both)
CLOUD_SCHEMES = {"s3": "s3fs", "gs": "gcsfs"}


def data_schemes() -> list[str]:
    """The ``data[i].source`` schemes this agent can read: https, upload and file always, s3 and gs
    when their fsspec implementation is installed (issue 28 item 5)."""
    return ["https", "upload", "file", *(s for s, module in CLOUD_SCHEMES.items() if importlib.util.find_spec(module))]


def collect(*, workdir: Path, simulate: str | None = None) -> Inventory:
    """The node's inventory; disk is the size (bytes) of the filesystem of ``workdir``."""
    hostname = socket.gethostname()
    gpus = simulated_gpus(simulate, hostname=hostname, workdir=workdir) if simulate else nvml_gpus()
    return Inventory(
        hostname=hostname,
        agent_version=__version__,
        gpus=gpus,
        cpus=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        memory_bytes=int(psutil.virtual_memory().total),
        disk_bytes=int(psutil.disk_usage(str(workdir)).total),
        runtimes=container_runtimes(),
        data_schemes=data_schemes(),
        simulated=bool(simulate),
    )
