"""Step 2, stage: fetch ``spec.data`` into the job dir, reporting ``staging`` progress."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e31_protocol import ExitReason, ReportType
from e31_protocol.redact import redact_text

from .. import node_inputs
from ..client import Aborted, ApiClient
from ..models import DataItem, JobRef
from ..reports import Reporter
from ..staging import Stager, StagingAborted, StagingError
from .base import Control, Dropped

log = logging.getLogger(__name__)

STAGING_REPORT_EVERY_S = 1.0  # seconds between two ``staging`` reports, at most one a second


@dataclass(frozen=True)
class StageJob:
    """What staging is handed: the inputs (``spec.data``), whether they go into a container
    (``spec.image``: no hard links into the cache, since a container may run as root), the
    node's input cache and download dirs, and the run's reporter and stop signals."""

    ref: JobRef
    data: list[DataItem]
    in_container: bool
    cache_dir: Path
    tmp_dir: Path
    client: ApiClient
    reporter: Reporter
    control: Control
    credentials: dict[str, Any]  # secret name -> its storage options (work's data[i].credentials), in memory only


def stage_inputs(job: StageJob, job_dir: Path) -> tuple[ExitReason, str] | None:
    """Stage ``job.data`` into ``job_dir``; returns (reason, message) when the run must not start.

    Inputs already in the node's cache (pre-staged while the job waited) are linked in at
    once; every ``staging`` report says how many bytes were downloaded on the meter
    (``bytes_fetched``) and how many came from the cache (``bytes_cached``), which the server
    turns into the lease's staging seconds.

    Raises:
        Dropped: the attempt was dropped meanwhile.
    """
    last = 0.0
    inputs = node_inputs.for_cache_dir(job.cache_dir)

    def report(done: int, total: int | None) -> None:
        job.reporter.send(ReportType.STAGING, bytes_done=done, bytes_total=total,
                          bytes_fetched=stager.fetched, bytes_cached=stager.cached)

    def progress(done: int, total: int | None) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= STAGING_REPORT_EVERY_S:
            last = now
            report(done, total)

    stager = Stager(
        client=job.client,
        job_dir=job_dir,
        tmp_dir=job.tmp_dir,
        cache=inputs.cache,
        file_roots=inputs.file_roots,
        net_policy=inputs.net_policy,
        extract_limits=inputs.extract_limits,
        hardlink_ok=inputs.hardlink_ok and not job.in_container,  # a container may run as root
        should_stop=lambda: job.control.stop_reason() is not None,
        progress=progress,
        credentials=job.credentials,
    )
    try:
        done = stager.stage(job.data)
    except StagingAborted:
        job.control.check_dropped()
        reason = job.control.stop_reason() or ExitReason.CANCELLED
        return reason, f"stopped while staging inputs ({reason})"
    except StagingError as exc:
        message = redact_text(str(exc))  # a URL's userinfo or signature never reaches a log or the server
        log.warning("%s: staging failed: %s", job.ref, message)
        return ExitReason.STAGING_FAILED, message
    except Aborted:
        raise Dropped() from None
    except Exception as exc:  # an unforeseen fetch error is still the input's fault
        log.error("%s: staging failed: %s", job.ref, redact_text(f"{type(exc).__name__}: {exc}"))
        return ExitReason.STAGING_FAILED, redact_text(f"{type(exc).__name__}: {exc}")
    report(done, done)
    log.info("%s: staged %d bytes (%d downloaded, %d from the cache)", job.ref, done,
             stager.fetched, stager.cached)
    return None
