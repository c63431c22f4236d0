"""Step 2, stage: fetch ``spec.data`` into the job dir, reporting ``staging`` progress."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from e31_protocol import ExitReason, ReportType
from e31_protocol.redact import redact_text

from .. import node_inputs
from ..client import Aborted
from ..staging import Stager, StagingAborted, StagingError
from .base import Dropped

if TYPE_CHECKING:
    from .run import JobRun

log = logging.getLogger(__name__)

STAGING_REPORT_EVERY_S = 1.0  # seconds between two ``staging`` reports, at most one a second


def stage_inputs(run: JobRun, job_dir: Path) -> tuple[ExitReason, str] | None:
    """Stage the inputs of ``run``'s assignment; returns (reason, message) when the run must not start.

    Inputs already in the node's cache (pre-staged while the job waited) are linked in at
    once; every ``staging`` report says how many bytes were downloaded on the meter
    (``bytes_fetched``) and how many came from the cache (``bytes_cached``), which the server
    turns into the lease's staging seconds.

    Raises:
        Dropped: the attempt was dropped meanwhile.
    """
    last = 0.0
    inputs = node_inputs.for_cache_dir(run.workdir.cache)

    def report(done: int, total: int | None) -> None:
        run.reporter.send(ReportType.STAGING, bytes_done=done, bytes_total=total,
                          bytes_fetched=stager.fetched, bytes_cached=stager.cached)

    def progress(done: int, total: int | None) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= STAGING_REPORT_EVERY_S:
            last = now
            report(done, total)

    stager = Stager(
        client=run.client,
        job_dir=job_dir,
        tmp_dir=run.workdir.tmp,
        cache=inputs.cache,
        file_roots=inputs.file_roots,
        net_policy=inputs.net_policy,
        extract_limits=inputs.extract_limits,
        hardlink_ok=inputs.hardlink_ok and not run.assignment.spec.image,  # a container may run as root
        should_stop=lambda: run.stop_reason() is not None,
        progress=progress,
        credentials=run.assignment.credentials,
    )
    try:
        done = stager.stage(run.assignment.spec.data)
    except StagingAborted:
        run.check_dropped()
        reason = run.stop_reason() or ExitReason.CANCELLED
        return reason, f"stopped while staging inputs ({reason})"
    except StagingError as exc:
        message = redact_text(str(exc))  # a URL's userinfo or signature never reaches a log or the server
        log.warning("%s: staging failed: %s", run.ref, message)
        return ExitReason.STAGING_FAILED, message
    except Aborted:
        raise Dropped() from None
    except Exception as exc:  # an unforeseen fetch error is still the input's fault
        log.error("%s: staging failed: %s", run.ref, redact_text(f"{type(exc).__name__}: {exc}"))
        return ExitReason.STAGING_FAILED, redact_text(f"{type(exc).__name__}: {exc}")
    report(done, done)
    log.info("%s: staged %d bytes (%d downloaded, %d from the cache)", run.ref, done,
             stager.fetched, stager.cached)
    return None
