"""Log storage: the bytes an agent streams, per attempt and node rank (SPEC §3, "run")."""
from __future__ import annotations

from django.conf import settings
from django.db import transaction

from apps.jobs import signals
from apps.jobs.models import Job, LogChunk


def log_append(*, job_id: int, attempt: int, rank: int, offset: int, data: bytes) -> int:
    """Store bytes of the attempt's log on node rank ``rank`` at byte ``offset``; bytes already
    stored are skipped. The caller has checked that the sender holds that rank of the attempt
    (:func:`apps.agent_api.reports.agent_log_append`).

    Returns the size of that rank's log now stored (bytes). Each rank's log is capped at
    ``E31_LOG_MAX_BYTES``; the first chunk past the cap is cut and a marker line appended.

    Raises:
        ValueError: ``offset`` is past the bytes stored (a gap).
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if rank == 0:
            size, cut = job.log_size, job.log_truncated
        else:
            last = LogChunk.objects.filter(job=job, attempt=attempt, node_rank=rank).order_by("-offset").first()
            size = last.offset + len(last.data) if last else 0
            cut = size > settings.E31_LOG_MAX_BYTES
        if cut or offset + len(data) <= size:
            return size
        if offset > size:
            raise ValueError(f"offset {offset} is past the {size} bytes stored")
        data = data[size - offset:]
        room = settings.E31_LOG_MAX_BYTES - size
        truncated = len(data) > room
        if truncated:
            data = data[:room] + b"\n[log cut: this job wrote more than the site keeps]\n"
        LogChunk.objects.create(job=job, attempt=attempt, node_rank=rank, offset=size, data=data)
        if rank == 0:  # the page's live tail is rank 0's
            Job.objects.filter(pk=job.pk).update(log_size=size + len(data), log_truncated=truncated)
            signals.log_appended.send(sender=Job, job_id=job.pk, attempt=attempt, offset=size, data=data,
                                      log_size=size + len(data))
        return size + len(data)
