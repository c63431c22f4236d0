"""E31 agent protocol: what the server and the agent share (docs/agent-protocol.md).

``PROTOCOL_VERSION`` is the version this package describes; :mod:`e31_protocol.codes` holds
the enums and machine-readable codes, :mod:`e31_protocol.payloads` the typed JSON bodies,
:mod:`e31_protocol.inputs` an input's cache identity (who may be served a cached copy).
Standard library only: no Django, no HTTP client.

Versions: 1 (agent 0.1), 2 (agent 0.2: folded reports, ``POST reports/``, ``?have=``),
3 (agent 0.3: ``code`` fields instead of message text; every agent call in the OpenAPI
document), 4 (agent 0.4: the input cache keyed by :mod:`e31_protocol.inputs` identities;
``input_scope`` in assignments and pre-stage offers; ``cached_inputs`` as identities; all
optional, nothing dropped). A v3 server still reads a v2 agent's message text (``finished``
prefixes) and a v3 agent a v2 server's ``"stale attempt"`` detail; v4 keeps that (to go in v5).
"""

from .codes import (
    LEGACY_FINISH_PREFIXES,
    LEGACY_PHASES,
    LOST_OUTPUT,
    AgentPhase,
    ErrorCode,
    ExitReason,
    FinishCode,
    HealthSource,
    NodeState,
    PrestageState,
    ReportType,
    finish_code,
    is_stale,
)

PROTOCOL_VERSION = 4
API_PREFIX = "/api/v1/agent"
MESSAGE_MAX = 2000  # characters of a report's ``message`` the server keeps
REPORTS_PER_BATCH_MAX = 100  # reports in one ``POST reports/``
LOG_CHUNK_MAX_BYTES = 1024 * 1024  # bytes in one ``POST jobs/<id>/log/``
HAVE_MAX = 1000  # attempts in ``GET work/?have=``
WORK_WAIT_MAX_S = 30  # the longest ``?wait=`` of ``GET work/``
SAMPLES_PER_POST_MAX = 500  # usage samples in one ``POST jobs/<id>/samples/``

__all__ = [
    "API_PREFIX",
    "HAVE_MAX",
    "LEGACY_FINISH_PREFIXES",
    "LEGACY_PHASES",
    "LOG_CHUNK_MAX_BYTES",
    "LOST_OUTPUT",
    "MESSAGE_MAX",
    "PROTOCOL_VERSION",
    "REPORTS_PER_BATCH_MAX",
    "SAMPLES_PER_POST_MAX",
    "WORK_WAIT_MAX_S",
    "AgentPhase",
    "ErrorCode",
    "ExitReason",
    "FinishCode",
    "HealthSource",
    "NodeState",
    "PrestageState",
    "ReportType",
    "finish_code",
    "is_stale",
]
