"""The agent's typed client of the agent API (docs/agent-protocol.md), one module per resource.

:class:`ApiClient` is the one client the agent holds; its calls come from the resource
modules: :mod:`.nodes` (register, heartbeat), :mod:`.work` (the long poll), :mod:`.reports`
(job reports, single and batch), :mod:`.logs`, :mod:`.bundles`, :mod:`.uploads` (input
files), :mod:`.prestage`, :mod:`.samples` (usage charts); :mod:`.transport` holds the
connection, retries and errors. Bodies are typed with :mod:`e31_protocol.payloads`.
"""

from __future__ import annotations

from .bundles import BundleCalls
from .logs import LogCalls
from .nodes import NodeCalls
from .prestage import PrestageCalls
from .reports import ReportCalls
from .samples import SampleCalls
from .transport import Aborted, ApiError, OffsetMismatch, StaleAttempt, Transport
from .uploads import UploadCalls, filename_of
from .work import WorkCalls


class ApiClient(NodeCalls, WorkCalls, ReportCalls, LogCalls, BundleCalls, UploadCalls, PrestageCalls,
                SampleCalls):
    """The agent's side of the protocol: every call of every resource, on one connection.

    Built as :class:`~.transport.Transport` (``server``, ``token``, ``stop``, ``backoff``,
    ``timeout_s``, ``transport``).
    """


__all__ = [
    "Aborted",
    "ApiClient",
    "ApiError",
    "OffsetMismatch",
    "StaleAttempt",
    "Transport",
    "filename_of",
]
