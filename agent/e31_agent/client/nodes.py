"""Node calls: ``POST register/`` and ``POST heartbeat/`` (docs/agent-protocol.md)."""

from __future__ import annotations

import threading

from e31_protocol import payloads

from ..models import HeartbeatAnswer, Inventory, JobRef, RegisterAnswer
from .transport import Transport


class NodeCalls(Transport):
    """Registration and heartbeats of this node."""

    def register(self, inventory: Inventory, *, abort: threading.Event | None = None) -> RegisterAnswer:
        """``POST register/``: announce the node and its hardware (retried until answered).

        Raises :class:`~e31_agent.client.ApiError` on a refusal (4xx).
        """
        body: payloads.RegisterRequest = inventory.to_json()  # type: ignore[assignment]
        data: payloads.RegisterResponse = self.request("POST", "/register/", json=body, abort=abort)
        return RegisterAnswer.from_json(data)

    def heartbeat(self, running: list[JobRef], *, health: payloads.Health | None = None,
                  cached_inputs: list[str] | None = None) -> HeartbeatAnswer:
        """``POST heartbeat/`` once (no retry: the next beat is the retry).

        ``health`` (GPU health, see :func:`e31_agent.inventory.gpu_health`) is sent when given, and
        ``cached_inputs`` (what the input cache holds, :meth:`e31_agent.cache.InputCache.identities`)
        too: the server prefers this node for jobs whose inputs it holds.
        Returns the attempts the server wants cancelled and the node's state there (``down``:
        register again).
        """
        body: payloads.HeartbeatRequest = {"running": [r.to_json() for r in running]}  # type: ignore[misc]
        if health is not None:
            body["health"] = health
        if cached_inputs is not None:
            body["cached_inputs"] = cached_inputs
        data: payloads.HeartbeatResponse = self.request("POST", "/heartbeat/", json=body, max_tries=1)
        return HeartbeatAnswer.from_json(data)
