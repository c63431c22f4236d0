"""Step 6, upload: send the bundle, resumable (:mod:`e31_agent.uploader`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from e31_protocol import FinishCode

from ..client import StaleAttempt
from ..packer import Bundle
from ..uploader import UploadError, upload_bundle
from .base import Dropped, OutputProblem
from .pack import not_packed_problem

if TYPE_CHECKING:
    from .run import JobRun

log = logging.getLogger(__name__)


def upload_outputs(run: JobRun, bundle: Bundle) -> OutputProblem | None:
    """Upload ``bundle``; returns what went wrong with the outputs (the upload failed for good:
    ``bundle_upload_failed``; declared files left out of it: ``outputs_not_packed``), or None.

    Raises:
        Dropped: the server says the attempt is over here (the run is dropped).
    """
    a = run.assignment
    log.info("%s: bundle of %d files, %d bytes", run.ref, len(bundle.files), bundle.size_bytes)
    try:
        upload_bundle(run.client, a.job_id, a.attempt, bundle, abort=run.abort)
    except UploadError as exc:
        log.error("%s: bundle upload failed: %s", run.ref, exc)
        return OutputProblem(FinishCode.BUNDLE_UPLOAD_FAILED, f"bundle upload failed: {exc}")
    except StaleAttempt:
        run.drop()
        raise Dropped() from None
    return not_packed_problem(bundle)
