"""GPU nodes, their GPUs and the agent credentials."""
from __future__ import annotations

import hashlib
from typing import Any

from django.db import models
from django.db.models import Q

from apps.core.choices import NodeState


def token_digest(token: str) -> str:
    """The stored form of a node token: its sha256, hex. Tokens are never stored."""
    return hashlib.sha256(token.encode()).hexdigest()


class Node(models.Model):
    """One GPU host running one agent (SPEC §1, §6).

    ``state``: ``up`` takes jobs, ``draining`` keeps its running jobs but
    takes no new ones, ``down`` missed heartbeats for the loss timeout.
    A node that never registered has no GPUs and takes nothing.
    """

    name = models.SlugField(max_length=64, unique=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.DOWN)
    drain = models.BooleanField(default=False, help_text="Operator asked for no new jobs.")
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True, editable=False)
    hostname = models.CharField(max_length=255, blank=True, default="")
    agent_version = models.CharField(max_length=32, blank=True, default="")
    cpus = models.PositiveIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    disk_bytes = models.BigIntegerField(default=0)
    runtimes = models.JSONField(default=list, blank=True, help_text="Container runtimes found.")
    data_schemes = models.JSONField(null=True, blank=True, help_text=(
        "The data source schemes its agent reads (https, s3, gs, ...); null: an agent that does not say."))
    simulated = models.BooleanField(default=False)
    sandboxed = models.BooleanField(
        default=False,
        help_text="The agent runs every job in its tenant sandbox (False: started with --unsafe-no-sandbox, "
                  "or an agent too old to say).")
    health = models.JSONField(
        default=dict, blank=True,
        help_text="GPU health from the last heartbeat: {source, at, gpus: [{uuid, index, temperature_c, "
                  "utilization_pct, memory_used_mb, ecc_uncorrected, ecc_corrected}]}.")
    registered_at = models.DateTimeField(null=True, blank=True)
    first_registered_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the node first joined the pool: the operator report counts its GPUs from then on.")
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def gpu_health(self) -> list[dict[str, Any]]:
        """The last heartbeat's health of each GPU, by index, with a ``warning`` text (or "").

        Shape: ``[{"index", "uuid", "temperature_c", "utilization_pct", "memory_used_mb",
        "ecc_uncorrected", "ecc_corrected", "warning"}]``; figures are None where the agent
        could not read them. Warnings: temperature at or above ``GPU_HOT_C`` (the slowdown
        range of data-centre GPUs per NVIDIA's thermal specs), or any uncorrected ECC error
        since the driver loaded (NVIDIA's advice: drain and reset the GPU); first, where the GPU is
        quarantined (SPEC §5), "quarantined: <reason>".
        """
        rows = []
        held = {g.index: g.quarantine_reason for g in self.gpus.all() if g.quarantined_at is not None}
        for gpu in (self.health or {}).get("gpus") or []:
            temp, ecc = gpu.get("temperature_c"), gpu.get("ecc_uncorrected")
            warnings = [f"quarantined: {held[gpu.get('index')]}"] if gpu.get("index") in held else []
            if temp is not None and temp >= GPU_HOT_C:
                warnings.append(f"hot ({temp} °C)")
            if ecc:
                warnings.append(f"{ecc} uncorrected ECC errors")
            rows.append({**{k: gpu.get(k) for k in GPU_HEALTH_FIELDS}, "warning": ", ".join(warnings)})
        return sorted(rows, key=lambda r: (r["index"] is None, r["index"]))


GPU_HOT_C = 85  # degrees C
GPU_HEALTH_FIELDS = ("index", "uuid", "temperature_c", "utilization_pct", "memory_used_mb", "ecc_uncorrected",
                     "ecc_corrected")


class Gpu(models.Model):
    """One GPU of a node, as the agent's inventory reported it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=100)
    model = models.CharField(max_length=64, db_index=True)
    memory_mb = models.PositiveIntegerField()
    present = models.BooleanField(default=True, help_text="In the node's last inventory.")
    quarantine_reason = models.CharField(
        max_length=200, blank=True, default="",
        help_text="Why no job gets this GPU (memory in use or a process with no lease, uncorrected ECC errors); "
                  "'' when clean. Written only by apps.pool.state.")
    quarantined_at = models.DateTimeField(null=True, blank=True, help_text="Since when it is quarantined.")

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_node_index_unique")]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.index} {self.model}"


class NodeDowntime(models.Model):
    """One span a node was ``down`` (SPEC §3): from its last heartbeat to its next registration.

    ``gpus`` is the node's present GPUs by model when it went down
    (``{"H100-80GB": 4}``), so reports count down GPU-hours per model.
    ``up_at`` is null while the node is still down.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="downtimes")
    down_at = models.DateTimeField()
    up_at = models.DateTimeField(null=True, blank=True)
    gpus = models.JSONField(default=dict)

    class Meta:
        ordering = ["-down_at"]
        constraints = [
            # At most one open span per node: a duplicate "lost" pass records nothing twice.
            models.UniqueConstraint(fields=["node"], condition=Q(up_at__isnull=True),
                                    name="one_open_downtime_per_node"),
            models.CheckConstraint(condition=Q(up_at__isnull=True) | Q(up_at__gte=models.F("down_at")),
                                   name="downtime_up_after_down"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} down from {self.down_at:%Y-%m-%d %H:%M}"
