"""Step 6, upload: send the bundle, resumable (:mod:`e31_agent.uploader`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from e31_protocol import FinishCode

from ..client import ApiClient, StaleAttempt
from ..models import JobRef
from ..packer import Bundle
from ..uploader import UploadError, upload_bundle
from .base import Control, Dropped, OutputProblem
from .pack import not_packed_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UploadJob:
    """What the upload is handed: the attempt, the API client, and the run's stop signals (its
    ``abort`` ends the upload's retries; a stale attempt drops the run)."""

    ref: JobRef
    client: ApiClient
    control: Control


def upload_outputs(job: UploadJob, bundle: Bundle) -> OutputProblem | None:
    """Upload ``bundle``; returns what went wrong with the outputs (the upload failed for good:
    ``bundle_upload_failed``; declared files left out of it: ``outputs_not_packed``), or None.

    Raises:
        Dropped: the server says the attempt is over here (the run is dropped).
    """
    log.info("%s: bundle of %d files, %d bytes", job.ref, len(bundle.files), bundle.size_bytes)
    try:
        upload_bundle(job.client, job.ref.job_id, job.ref.attempt, bundle, abort=job.control.abort)
    except UploadError as exc:
        log.error("%s: bundle upload failed: %s", job.ref, exc)
        return OutputProblem(FinishCode.BUNDLE_UPLOAD_FAILED, f"bundle upload failed: {exc}")
    except StaleAttempt:
        job.control.drop_now()
        raise Dropped() from None
    return not_packed_problem(bundle)
