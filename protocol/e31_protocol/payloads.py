"""The JSON body of every agent call and answer, as ``TypedDict`` shapes (docs/agent-protocol.md).

Names: ``<Call>Request`` is what the agent sends, ``<Call>Response`` what the server answers
(status 200). Units are in the field names (``_s`` seconds, ``_bytes`` bytes, ``_mb`` MiB).
These are types for checkers and readers; the server validates with its serializers
(apps/agent_api/api/serializers.py), which the OpenAPI document at ``/api/v1/schema/`` publishes,
and a test (tests/agent_api/test_payload_shapes.py) checks every serializer against its shape here:
field names, required or not, types.

No ``from __future__ import annotations`` here: with string annotations Python 3.11 cannot see
``NotRequired`` when it builds a ``TypedDict``, and every key would read as required at run time
(``__required_keys__``).
"""

from typing import Any, NotRequired, TypedDict

from .codes import ErrorCode, ExitReason, FinishCode, HealthSource, NodeState, PrestageState, ReportType

# -- shared pieces ---------------------------------------------------------------------


class AttemptRef(TypedDict):
    """One attempt of one job."""

    job_id: int
    attempt: int


class ErrorBody(TypedDict):
    """A 4xx (or a batch item's) error: ``detail`` for people, ``code`` for programs (v3)."""

    detail: str
    code: NotRequired[ErrorCode]


# -- register: POST /api/v1/agent/register/ ----------------------------------------------


class GpuInfo(TypedDict):
    index: int
    uuid: str
    model: str  # normalised: family, dash, nominal memory in GB ("H100-80GB")
    memory_mb: int  # MiB, as NVML reports it


class RegisterRequest(TypedDict):
    hostname: str
    agent_version: NotRequired[str]
    gpus: list[GpuInfo]
    cpus: int
    memory_bytes: int
    disk_bytes: NotRequired[int]
    runtimes: NotRequired[list[str]]
    simulated: NotRequired[bool]
    sandboxed: NotRequired[bool]
    data_schemes: NotRequired[list[str]]  # issue 28: source schemes it reads; absent: an agent that does not say


class RegisterResponse(TypedDict):
    node: str
    heartbeat_interval_s: float
    poll_wait_s: float
    node_loss_timeout_s: float
    running: list[AttemptRef]
    protocol_version: NotRequired[int]  # v3 servers


# -- heartbeat: POST /api/v1/agent/heartbeat/ --------------------------------------------


class GpuHealth(TypedDict):
    uuid: str
    index: int
    temperature_c: NotRequired[int | None]
    utilization_pct: NotRequired[int | None]
    memory_used_mb: NotRequired[int | None]
    ecc_uncorrected: NotRequired[int | None]
    ecc_corrected: NotRequired[int | None]
    processes: NotRequired[int | None]  # compute processes on the GPU (issue 26 item 3)
    xid: NotRequired[int | None]  # the last XID error NVML reported; 0 or absent: none


class Health(TypedDict):
    source: HealthSource
    gpus: list[GpuHealth]


class HeartbeatRequest(TypedDict):
    running: list[AttemptRef]
    health: NotRequired[Health]
    # v4: the cache identities (e31_protocol.inputs.input_identity, ``in1-<hex>``) of the entries the
    # node's cache holds, most recently used first, at most 1000 (a v3 agent sent digests and sources)
    cached_inputs: NotRequired[list[str]]


class HeartbeatResponse(TypedDict):
    cancel: list[AttemptRef]
    state: NodeState


# -- work: GET /api/v1/agent/work/?wait=S&have=J.A,... -----------------------------------


class DataInput(TypedDict):
    """One input of ``spec.data`` (also of a pre-stage offer)."""

    source: str  # upload:<id>, https://, s3://, gs://, file://
    target: str
    sha256: NotRequired[str | None]
    extract: NotRequired[bool]
    credentials: NotRequired[str]  # the name of the owner's secret holding the storage options


class AssignedGpu(TypedDict):
    """One GPU of an assignment: the node's index and NVML's UUID (as the agent registered them)."""

    index: int
    uuid: str


class InputScope(TypedDict):
    """v4: whose inputs a job's are, for the node's input cache (e31_protocol.inputs).

    ``owner``: the job owner's opaque tenant id (``ow1-<hex>``, a keyed hash on the server);
    ``project``: the project's (issue 20; absent until then); ``credentials``: per ``spec.data``
    index, the id of the credentials that input is read with (``cr1-<hex>``) or null (anonymous);
    absent: all anonymous.
    """

    owner: str
    project: NotRequired[str | None]
    credentials: NotRequired[list[str | None]]


class GangNode(TypedDict):
    rank: int  # node rank, 0 first
    host: str  # the node's address as the server knows it
    gpus: int  # GPUs of the gang on that node (an MPI hostfile's slots)


class GangNet(TypedDict):
    name: str  # 8 hex: the attempt's bridge on each host (e31b<name>)
    vni: int  # the VXLAN id joining the attempt's ranks across hosts
    prefix: int  # bits of the gang's network
    addresses: list[str]  # each node rank's address on gang0, rank 0 first (MASTER_ADDR)


class CheckpointPlan(TypedDict):
    path: str  # checkpoint.path, a directory of the job dir
    attempt: int | None  # the attempt whose version the files are (None: nothing kept yet)
    files: list[dict[str, Any]]  # {"path", "size_bytes", "sha256"}, fetched from jobs/<id>/checkpoint/


class Assignment(TypedDict):
    job_id: int
    attempt: int
    lease_id: int
    gpus: list[AssignedGpu]
    time_limit_s: int
    deadline_in_s: float
    grace_s: float
    env: dict[str, str]
    spec: dict[str, Any]  # the validated job spec, normalised (SPEC §2)
    array_index: int | None
    array_size: int | None
    output_max_bytes: NotRequired[int]
    input_scope: NotRequired[InputScope]  # v4 servers; without it uploads are not cached
    # Issue 23: values of the secrets the spec names, only to the node holding the attempt; the agent
    # keeps them in memory only (never its disk, a log or a command line).
    secrets: NotRequired[dict[str, str]]  # work.secrets: name -> value, into the job's environment
    credentials: NotRequired[dict[str, str]]  # data[i].credentials: name -> storage options JSON
    start_refused: NotRequired[str]  # the attempt must fail at its start (start_failed), with this reason
    gang: NotRequired[list[GangNode]]  # issue 24: the attempt's nodes, for the hostfile (E31_HOSTFILE)
    checkpoint: NotRequired[CheckpointPlan]  # issue 24: the spec names a checkpoint directory
    gang_net: NotRequired[GangNet]  # issue 24 item 1: a multi-node attempt's own network


class PrestageOffer(TypedDict):
    job_id: int
    new: bool
    data: list[DataInput]
    input_scope: NotRequired[InputScope]  # v4 servers
    image: NotRequired[str]  # issue 23: work.image to pull anonymously while the job waits (none with a login)


class WorkResponse(TypedDict):
    assignments: list[Assignment]
    cancel: list[AttemptRef]
    prestage: list[PrestageOffer]


# -- reports: POST /api/v1/agent/jobs/<id>/report/ and POST /api/v1/agent/reports/ -------


class Exited(TypedDict):
    """An ``exited`` report's fields; also what a folded ``finished`` carries as ``exited``."""

    exit_code: int | None
    reason: ExitReason
    message: NotRequired[str]
    elapsed_s: NotRequired[float]


class Report(TypedDict):
    """One job report. Which optional fields go with which ``type``: docs/agent-protocol.md."""

    attempt: int
    seq: int
    type: ReportType
    # staging
    bytes_done: NotRequired[int]
    bytes_total: NotRequired[int | None]
    bytes_fetched: NotRequired[int]
    bytes_cached: NotRequired[int]
    # running
    pid: NotRequired[int]
    # running, exited
    elapsed_s: NotRequired[float]
    # exited
    exit_code: NotRequired[int | None]
    reason: NotRequired[ExitReason]
    # exited, finished
    message: NotRequired[str]
    # finished
    code: NotRequired[FinishCode]
    exited: NotRequired[Exited]


class ReportResponse(TypedDict):
    duplicate: bool


class BatchReport(Report):
    job_id: int


class ReportBatchRequest(TypedDict):
    reports: list[BatchReport]


class ReportResult(TypedDict):
    """The answer to one report of a batch: what the single call would have answered."""

    job_id: int | None
    seq: int | None
    status: int  # 200, 400, 404, 409, 500, 503
    duplicate: NotRequired[bool]
    detail: NotRequired[str]
    code: NotRequired[ErrorCode]
    errors: NotRequired[dict[str, Any]]


class ReportBatchResponse(TypedDict):
    results: list[ReportResult]


# -- logs: POST /api/v1/agent/jobs/<id>/log/?attempt=A&offset=N (body: raw bytes) --------


class LogResponse(TypedDict):
    size: int  # bytes of the log the server holds


# -- samples: POST /api/v1/agent/jobs/<id>/samples/?attempt=A (optional: usage charts) ---
# An agent that never sends samples, or a server that answers 404 to this call, loses nothing
# but the job's usage charts (docs/agent-protocol.md, "samples").


class GpuSample(TypedDict):
    """One GPU held by the job, read from NVML (None: NVML could not say)."""

    index: int  # the node's GPU index, as in the assignment
    gpu_util_percent: int | None  # percent of NVML's last sample period the GPU was busy
    gpu_memory_bytes: int | None  # device memory in use, bytes


class Sample(TypedDict):
    """The job's usage at one moment."""

    seq: int  # increasing per attempt (ms since the accept on the agent's clock): a resent sample is skipped
    ago_s: float  # seconds before this post it was taken: the server's clock places it
    cpu_percent: float  # CPU of the job's process tree, percent of one CPU (top's way: 250 = 2.5 CPUs)
    rss_bytes: int  # resident memory of the job's process tree, bytes
    gpus: NotRequired[list[GpuSample]]  # only when gpu_source is "nvml"


class SamplesRequest(TypedDict):
    gpu_source: HealthSource  # nvml: real figures; simulated / none: no GPU series
    samples: list[Sample]


class SamplesResponse(TypedDict):
    stored: int  # samples of this post newly stored (a repeat stores none)


# -- bundles: GET/PUT /api/v1/agent/jobs/<id>/bundle/, POST .../bundle/complete/ ----------


class BundleStatusResponse(TypedDict):
    received_bytes: int
    complete: bool
    direct: NotRequired[bool]  # the server keeps files in an object store: POST bundle/direct/ (issue 15)
    verifying: NotRequired[bool]  # joined in the store, being verified
    refused: NotRequired[str]  # why the last direct upload was refused ("" if it was not)


class BundleDirectRequest(TypedDict):
    """``POST jobs/<id>/bundle/direct/``: the size of the whole bundle, bytes."""

    size_bytes: int


class BundleDirectPart(TypedDict):
    part_number: int
    offset: int
    size_bytes: int
    url: str  # PUT the part's bytes here, with no Authorization header (the URL is signed)


class BundleDirectUploaded(TypedDict):
    part_number: int
    size_bytes: int


class BundleDirectResponse(TypedDict):
    """``POST jobs/<id>/bundle/direct/`` (body ``{"size_bytes"}``): parts still to send, parts held."""

    upload_id: str
    part_bytes: int
    parts: list[BundleDirectPart]
    uploaded: list[BundleDirectUploaded]
    expires_in_s: int


class BundleChunkResponse(TypedDict):
    received_bytes: int


class ManifestFile(TypedDict):
    path: str
    size_bytes: int
    sha256: str
    offset: NotRequired[int]  # where the file's bytes start in the (uncompressed) archive


class BundleCompleteRequest(TypedDict):
    size_bytes: int
    sha256: str
    files: list[ManifestFile]
    # declared output paths/globs that matched no file (issue 16); absent from older agents
    unmatched: NotRequired[list[str]]


class BundleCompleteResponse(TypedDict):
    size_bytes: int
    sha256: str
    verifying: NotRequired[bool]  # 202: being verified in the store; ask GET bundle/ until complete


class BundleErrorBody(ErrorBody):
    received_bytes: int


# -- pre-staging: POST /api/v1/agent/prestage/ --------------------------------------------


class PrestageProgress(TypedDict):
    job_id: int
    state: PrestageState
    bytes_done: int
    bytes_total: NotRequired[int | None]
    message: NotRequired[str]


class PrestageRequest(TypedDict):
    jobs: list[PrestageProgress]


class PrestageResponse(TypedDict):
    prestage: list[int]  # job ids still wanted here


# uploads: GET /api/v1/agent/uploads/<uuid>/ answers the file's bytes (Content-Disposition: its name).
