"""Scheduling cycles without a broker: a coalescing loop of this process (issue 10, item 1).

In production a commit that may change the plan sends one Celery task, and a
Redis flag (SET NX) keeps a burst of commits to one queued cycle
(:mod:`apps.scheduling.tasks`). Without a broker (``make run``, eager Celery) the
same job is done here: :func:`cycle_wanted` only *asks* (it sets an event and
returns at once), and a :class:`CycleLoop` thread runs the cycles. Asks that
arrive while a cycle runs are answered together by the next one, so a burst of
submits costs at most one cycle more, and no web request ever runs a cycle.

The process's runner is set with :func:`set_runner`: ``manage.py standalone``
starts its loop at boot; the test suite installs its own (``tests/cycles.py``),
which runs the cycle asked for after the request that asked for it returns.
With none set, the first ask starts a loop in this process.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections

from .adapter import schedule_cycle

log = logging.getLogger(__name__)

_runner: Callable[[], None] | None = None
_runner_lock = threading.Lock()


def run_one_cycle() -> None:
    """One scheduling cycle on this thread's own database connection (what
    :func:`apps.scheduling.tasks.schedule_cycle_task` runs without a broker)."""
    close_old_connections()
    try:
        schedule_cycle()
    finally:
        close_old_connections()


class CycleLoop(threading.Thread):
    """Runs scheduling cycles in a thread of its own while they are asked for.

    :meth:`wake` is cheap and never blocks (safe in a request's commit hook).
    The event is cleared *before* a cycle reads the queue, so an ask that comes
    during a cycle makes one more cycle, never zero. After a cycle of ``d``
    seconds the next starts no sooner than ``d * (1 / duty - 1)`` later: in one
    process (``make run``) cycles on a long queue take at most ``duty`` of the
    time, and the requests the rest.
    """

    def __init__(self, run: Callable[[], None] = run_one_cycle, duty: float = 0.5):
        super().__init__(name="e31-cycle-loop", daemon=True)
        self._run_once = run
        self.wanted = threading.Event()
        self.stopped = threading.Event()
        self.cycles = 0
        self.duty = duty

    def wake(self) -> None:
        """Ask for a cycle (coalesced with every other ask until it starts)."""
        self.wanted.set()

    def stop(self) -> None:
        """End the loop after the cycle running now, if any."""
        self.stopped.set()
        self.wanted.set()

    def run(self) -> None:
        while True:
            self.wanted.wait()
            if self.stopped.is_set():
                return
            self.wanted.clear()
            started = time.monotonic()
            try:
                self._run_once()
            except Exception:
                log.exception("scheduling cycle failed")
            self.cycles += 1
            rest = (time.monotonic() - started) * (1 / self.duty - 1)
            if rest > 0.001 and self.stopped.wait(rest):
                return


def set_runner(runner: Callable[[], None] | None) -> Callable[[], None] | None:
    """Make ``runner`` what :func:`cycle_wanted` calls in this process; returns the previous one."""
    global _runner
    with _runner_lock:
        previous, _runner = _runner, runner
    return previous


def cycle_wanted() -> None:
    """Ask this process's runner for a cycle (eager mode, after a commit). Never runs one here."""
    global _runner
    runner = _runner
    if runner is None:
        with _runner_lock:
            if _runner is None:
                loop = CycleLoop()
                loop.start()
                _runner = loop.wake
            runner = _runner
    runner()
