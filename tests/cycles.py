"""The test suite's scheduling-cycle runner (eager Celery, no loop thread; issue 10, item 1).

A commit that may change the plan only *asks* for a cycle
(:func:`apps.scheduling.cycle_loop.cycle_wanted`). Here the harness answers, on the
test's own thread and database connection, so tests stay deterministic:

- asked by a service the test called directly: the cycle runs at once (as a
  worker would, a moment later);
- asked during a request of the test client: the request finishes first
  (``request_finished``, after the response is built), then the cycle runs.
  A request never runs a cycle, and :attr:`HarnessCycles.during_request` counts
  any cycle that would have, for the test that checks it.
"""
from __future__ import annotations

import threading

from django.core.signals import request_finished, request_started


class HarnessCycles:
    """Runs asked-for cycles on the test's thread, never inside a request."""

    def __init__(self) -> None:
        self.in_request = 0
        self.pending = False
        self.running = False
        self.ran = 0
        self.during_request = 0
        self._thread = threading.get_ident()

    def wanted(self) -> None:
        if threading.get_ident() != self._thread:
            return  # a live-stack or consumer thread: its own process runs cycles
        self.pending = True
        if not self.in_request:
            self.drain()

    def drain(self) -> None:
        from apps.scheduling.tasks import schedule_cycle_task

        if self.running:
            return  # the running cycle's caller loops once more
        self.running = True
        try:
            while self.pending:
                self.pending = False
                if self.in_request:
                    self.during_request += 1
                schedule_cycle_task()
                self.ran += 1
        finally:
            self.running = False

    def started(self, **kwargs) -> None:
        if threading.get_ident() == self._thread:
            self.in_request += 1

    def finished(self, **kwargs) -> None:
        if threading.get_ident() == self._thread and self.in_request:
            self.in_request -= 1
            if not self.in_request and self.pending:
                self.drain()

    def install(self) -> None:
        from apps.scheduling.cycle_loop import set_runner

        self._previous = set_runner(self.wanted)
        request_started.connect(self.started, dispatch_uid="e31-test-cycles-start")
        request_finished.connect(self.finished, dispatch_uid="e31-test-cycles-finish")

    def uninstall(self) -> None:
        from apps.scheduling.cycle_loop import set_runner

        request_started.disconnect(dispatch_uid="e31-test-cycles-start")
        request_finished.disconnect(dispatch_uid="e31-test-cycles-finish")
        set_runner(self._previous)
