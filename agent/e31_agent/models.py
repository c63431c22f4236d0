"""Typed shapes of what the agent sends and receives (docs/agent-protocol.md).

The wire shapes are :mod:`e31_protocol.payloads` (shared with the server); these dataclasses
are the agent's own reading of them.

Parsing is lenient about extra fields (the server may add some) and strict
about the ones the agent needs: a missing required field raises ``KeyError``
or ``ValueError``, which the caller treats as a bad answer.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from e31_protocol import payloads
from e31_protocol.inputs import input_identity

from .gangnet import GangNet

SECRET_FIELDS = ("secrets", "credentials")  # assignment fields that hold secret values (never stored)


@dataclass(frozen=True)
class JobRef:
    """One attempt of one job: what heartbeats and cancels talk about."""

    job_id: int
    attempt: int

    @classmethod
    def from_json(cls, data: payloads.AttemptRef) -> JobRef:
        return cls(job_id=int(data["job_id"]), attempt=int(data["attempt"]))

    def to_json(self) -> payloads.AttemptRef:
        return {"job_id": self.job_id, "attempt": self.attempt}

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of the node; ``memory_mb`` in MiB (as NVML reports it)."""

    index: int
    uuid: str
    model: str
    memory_mb: int


@dataclass
class Inventory:
    """What ``register`` sends: the node's hardware; sizes in bytes."""

    hostname: str
    agent_version: str
    gpus: list[GpuInfo]
    cpus: int
    memory_bytes: int
    disk_bytes: int
    runtimes: list[str]
    simulated: bool
    sandboxed: bool = True  # False: the agent runs jobs without the tenant sandbox (--unsafe-no-sandbox)
    data_schemes: list[str] = field(default_factory=list)  # sources it can read: https, s3, gs, file (issue 28)

    def to_json(self) -> payloads.RegisterRequest:
        return asdict(self)  # type: ignore[return-value]


@dataclass(frozen=True)
class RegisterAnswer:
    """The server's answer to ``register``; intervals in seconds."""

    node: str
    heartbeat_interval_s: float
    poll_wait_s: float
    running: list[JobRef]
    # the server declares a node down after this long without a heartbeat; an agent that cannot
    # reach the server (and a job shim that cannot hear its agent) that long stops its runs
    node_loss_timeout_s: float | None = None

    @classmethod
    def from_json(cls, data: payloads.RegisterResponse) -> RegisterAnswer:
        loss = data.get("node_loss_timeout_s")
        return cls(
            node=str(data.get("node", "")),
            heartbeat_interval_s=float(data.get("heartbeat_interval_s") or 10),
            poll_wait_s=float(data.get("poll_wait_s") or 20),
            running=[JobRef.from_json(r) for r in data.get("running") or []],
            node_loss_timeout_s=float(loss) if loss else None,
        )


@dataclass(frozen=True)
class HeartbeatAnswer:
    """The server's answer to a heartbeat: cancels, and the node's state there."""

    cancel: list[JobRef]
    state: str = ""  # an e31_protocol.NodeState ("up", "draining", "down"); "" from a server that sent none

    @classmethod
    def from_json(cls, data: payloads.HeartbeatResponse) -> HeartbeatAnswer:
        return cls(
            cancel=[JobRef.from_json(c) for c in data.get("cancel") or []],
            state=str(data.get("state") or ""),
        )


@dataclass(frozen=True)
class DataItem:
    """One input of ``spec.data``: fetched from ``source`` to ``target``.

    ``owner``, ``project`` and ``credentials_id`` come from the assignment's (or pre-stage
    offer's) ``input_scope`` (protocol v4): whose input it is, for the node's cache
    (:attr:`identity`). None from an older server: then an upload is not cached.
    """

    source: str
    target: str = ""
    sha256: str | None = None
    extract: bool = False
    owner: str | None = None
    project: str | None = None
    credentials_id: str | None = None
    credentials: str | None = None  # the name of the secret with this source's storage options

    @property
    def identity(self) -> str | None:
        """The input's cache identity (:func:`e31_protocol.inputs.input_identity`); None: never cached.
        An input read with named credentials and no credentials id from the server is never cached:
        under the anonymous identity another tenant's anonymous read would find its bytes."""
        if self.credentials and not self.credentials_id:
            return None
        return input_identity(self.source, owner=self.owner, project=self.project,
                              credentials_id=self.credentials_id)

    @classmethod
    def from_json(cls, data: payloads.DataInput, *, scope: payloads.InputScope | None = None,
                  index: int = 0) -> DataItem:
        """One ``spec.data`` item; ``scope`` the answer's ``input_scope``, ``index`` the item's place."""
        sha = data.get("sha256")
        scope = scope if isinstance(scope, dict) else {}
        credentials = scope.get("credentials") or []
        credentials_id = credentials[index] if isinstance(credentials, list) and index < len(credentials) else None
        return cls(
            source=str(data["source"]),
            target=str(data.get("target") or ""),
            sha256=str(sha).lower() if sha else None,
            extract=bool(data.get("extract") or False),
            owner=str(scope["owner"]) if scope.get("owner") else None,
            project=str(scope["project"]) if scope.get("project") else None,
            credentials_id=str(credentials_id) if credentials_id else None,
            credentials=str(data["credentials"]) if data.get("credentials") else None,
        )


def data_items(data: list[payloads.DataInput] | None, scope: Any = None) -> list[DataItem]:
    """``spec.data`` as :class:`DataItem`, each with its share of ``scope`` (``input_scope``)."""
    return [DataItem.from_json(d, scope=scope, index=i) for i, d in enumerate(data or [])]


@dataclass(frozen=True)
class JobSpec:
    """The parts of a validated job spec (SPEC §2) the agent acts on."""

    name: str
    command: str
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    data: list[DataItem] = field(default_factory=list)
    output_paths: list[str] = field(default_factory=list)
    network: str = "egress"  # work.network: "egress" or "none"
    image_credentials: str | None = None  # work.image_credentials: the secret (in credentials) to pull with

    @classmethod
    def from_json(cls, data: dict[str, Any], *, input_scope: payloads.InputScope | None = None) -> JobSpec:
        """The spec; ``input_scope``: the assignment's (see :class:`DataItem`)."""
        work = data.get("work") or {}
        output = data.get("output") or {}
        return cls(
            name=str(data.get("name", "")),
            command=str(work["command"]),
            image=work.get("image") or None,
            env={str(k): str(v) for k, v in (work.get("env") or {}).items()},
            data=data_items(data.get("data"), input_scope),
            output_paths=[str(p) for p in output.get("paths") or []],
            network="none" if work.get("network") == "none" else "egress",
            image_credentials=work.get("image_credentials") or None,
        )


@dataclass(frozen=True)
class Assignment:
    """One lease handed to this node by ``work``.

    ``deadline`` is on this process's ``time.monotonic()`` clock: the moment
    the answer arrived plus ``deadline_in_s``, so the agent's wall clock never
    matters. ``grace_s`` is the SIGTERM-to-SIGKILL delay in seconds; it sits
    inside the limit (at most 10 % of ``time_limit_s``), and the run gets its
    SIGTERM at :attr:`term_at`, so SIGKILL lands at the deadline.
    """

    job_id: int
    attempt: int
    lease_id: int | None
    gpu_indices: list[int]
    time_limit_s: float
    deadline: float
    grace_s: float
    env: dict[str, str]
    spec: JobSpec
    gpu_uuids: list[str] = field(default_factory=list)
    cpus: int | None = None  # spec.compute.cpus: CPUs the job may use
    memory_bytes: int | None = None  # spec.compute.memory_gb in bytes: the job's memory cap
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # as received
    output_max_bytes: int | None = None  # the site's cap on the bundle's files, bytes
    # Issue 23: secret values, in memory only: never in ``raw`` (which goes to the state dir), never repr'd
    secrets: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # work.secrets
    credentials: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # name -> options JSON
    start_refused: str | None = None  # the server says the attempt cannot start (a secret was deleted)
    gang: list[tuple[str, int]] = field(default_factory=list)  # (host, GPUs) per node rank, rank 0 first
    gang_net: GangNet | None = None  # a multi-node attempt's network (issue 24 item 1)
    checkpoint_path: str | None = None  # checkpoint.path: packed at the end, restored before the run
    checkpoint_files: list[dict[str, Any]] = field(default_factory=list)  # {"path", "size_bytes", "sha256"}

    @property
    def ref(self) -> JobRef:
        return JobRef(self.job_id, self.attempt)

    @property
    def packed_paths(self) -> list[str]:
        """What the attempt's bundle holds: the declared outputs and the checkpoint directory."""
        extra = [f"{self.checkpoint_path}/**"] if self.checkpoint_path else []
        return [*self.spec.output_paths, *(p for p in extra if p not in self.spec.output_paths)]

    @property
    def term_at(self) -> float:
        """When the run gets SIGTERM at its time limit (monotonic s): ``grace_s`` before the
        deadline, so the hold never passes ``rented_at + time_limit``."""
        return self.deadline - self.grace_s

    @classmethod
    def from_json(cls, data: payloads.Assignment, *, received_at: float | None = None) -> Assignment:
        received = time.monotonic() if received_at is None else received_at
        time_limit = float(data.get("time_limit_s") or 0)
        deadline_in = data.get("deadline_in_s")
        compute = (data.get("spec") or {}).get("compute") or {}
        memory_gb = compute.get("memory_gb")
        return cls(
            job_id=int(data["job_id"]),
            attempt=int(data["attempt"]),
            lease_id=data.get("lease_id"),
            gpu_indices=[int(g["index"]) for g in data.get("gpus") or []],
            time_limit_s=time_limit,
            deadline=received + float(time_limit if deadline_in is None else deadline_in),
            grace_s=grace_inside(float(data.get("grace_s", 30)), time_limit),
            env=_assignment_env(data),
            spec=JobSpec.from_json(data["spec"], input_scope=data.get("input_scope")),
            gpu_uuids=[str(g.get("uuid") or "") for g in data.get("gpus") or []],
            cpus=int(compute["cpus"]) if compute.get("cpus") else None,
            memory_bytes=int(float(memory_gb) * 1024**3) if memory_gb else None,
            raw={k: v for k, v in data.items() if k not in SECRET_FIELDS},
            output_max_bytes=int(data["output_max_bytes"]) if data.get("output_max_bytes") else None,
            secrets={str(k): str(v) for k, v in (data.get("secrets") or {}).items()},
            credentials={str(k): str(v) for k, v in (data.get("credentials") or {}).items()},
            start_refused=str(data["start_refused"]) if data.get("start_refused") else None,
            gang=[(str(n["host"]), int(n["gpus"])) for n in sorted(data.get("gang") or [], key=lambda n: n["rank"])],
            gang_net=GangNet.from_json(data.get("gang_net")),
            checkpoint_path=(data.get("checkpoint") or {}).get("path") or None,
            checkpoint_files=list((data.get("checkpoint") or {}).get("files") or []),
        )


def grace_inside(grace_s: float, time_limit_s: float) -> float:
    """The SIGTERM-to-SIGKILL grace, inside the limit: at most 10 % of ``time_limit_s``
    (an older server sends the configured grace as it is)."""
    return min(grace_s, 0.1 * time_limit_s) if time_limit_s > 0 else grace_s


def _assignment_env(data: dict[str, Any]) -> dict[str, str]:
    """The assignment's ``env`` (``E31_JOB_ID``...), plus ``E31_ARRAY_INDEX`` (0..N-1) and
    ``E31_ARRAY_SIZE`` (N) for a task of a job array (``array_index``/``array_size`` in the answer)."""
    env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    if data.get("array_index") is not None and data.get("array_size") is not None:
        env["E31_ARRAY_INDEX"] = str(int(data["array_index"]))
        env["E31_ARRAY_SIZE"] = str(int(data["array_size"]))
    return env


@dataclass(frozen=True)
class PrestageOffer:
    """A queued job whose inputs this node should fetch into its cache now, meter off, and whose
    public image (``image``, pulled anonymously; None: none to pull) it should pull."""

    job_id: int
    data: list[DataItem]
    image: str | None = None

    @classmethod
    def from_json(cls, data: payloads.PrestageOffer) -> PrestageOffer:
        return cls(job_id=int(data["job_id"]), data=data_items(data.get("data"), data.get("input_scope")),
                   image=str(data["image"]) if data.get("image") else None)


@dataclass(frozen=True)
class WorkAnswer:
    """The answer of one ``work`` long poll."""

    assignments: list[Assignment]
    cancel: list[JobRef]
    prestage: list[PrestageOffer] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: payloads.WorkResponse, *, received_at: float | None = None) -> WorkAnswer:
        received = time.monotonic() if received_at is None else received_at
        return cls(
            assignments=[
                Assignment.from_json(a, received_at=received) for a in data.get("assignments") or []
            ],
            cancel=[JobRef.from_json(c) for c in data.get("cancel") or []],
            prestage=[PrestageOffer.from_json(p) for p in data.get("prestage") or []],
        )


@dataclass(frozen=True)
class FileEntry:
    """One file of a bundle's manifest; ``size_bytes`` in bytes.

    ``offset``: where the file's bytes start inside the (uncompressed) archive, in bytes
    from its first byte, so ``archive[offset:offset + size_bytes]`` is the file; None when
    unknown (a bundle packed by an older agent, or read back from a ``bundle.json`` that
    did not keep it). Omitted from :meth:`to_json` when None.
    """

    path: str
    size_bytes: int
    sha256: str
    offset: int | None = None

    def to_json(self) -> payloads.ManifestFile:
        data = asdict(self)
        if self.offset is None:
            del data["offset"]
        return data  # type: ignore[return-value]
