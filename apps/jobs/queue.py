"""The jobs app's side of the scheduling port (:class:`apps.scheduling.ports.JobQueue`).

Registered in :meth:`apps.jobs.apps.JobsConfig.ready`. Reads are plain ``values_list`` rows of
the jobs' typed requirement columns (never the spec); writes open leases and move jobs through
the state machine, inside the scheduling cycle's transaction.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import FloatField, Q
from django.db.models.expressions import RawSQL
from e31_protocol.inputs import image_identity

from apps.artifacts.models import Upload
from apps.core.choices import JobState
from apps.metering.lease import lease_open, lease_rent_clock
from apps.metering.models import Lease, LeaseGpu
from apps.pool.models import Gpu, Node
from apps.scheduling.ports import Hold, JobInputs, PositionChange, QueuedJob

from . import signals
from .dependencies import dependencies_settle
from .inputs import spec_input_identities
from .models import Job
from .prestage import prestage_plan
from .sources import is_uuid
from .state import transition

QUEUE_COLUMNS = ("id", "owner_id", "submitted_at", "gpus_per_node", "nodes", "time_limit_s", "priority_boost",
                 "gpu_models", "gpu_memory_mib", "cpus", "memory_mib", "needs_runtime", "mixed_models",
                 "queue_position", "estimated_start_at", "pending_reason", "latest_start_at", "project_id")
HOLD_COLUMNS = ("id", "node_id", "rented_at", "time_limit_s", "predicted_runtime_s", "job__cpus", "job__memory_mib")


def _epoch(column: str) -> RawSQL:
    return RawSQL(f"EXTRACT(EPOCH FROM {connection.ops.quote_name(column)})::float8", [],
                  output_field=FloatField())


class DatabaseJobQueue:
    """:class:`~apps.scheduling.ports.JobQueue` over the jobs and meter tables."""

    def queued(self) -> list[QueuedJob]:
        """The queue in submit order as :class:`QueuedJob` rows (times as epoch seconds)."""
        queued = Job.objects.filter(state=JobState.QUEUED).order_by("submitted_at", "id")
        if connection.vendor == "postgresql":  # epoch floats: no timestamp parsing per row
            cols = list(QUEUE_COLUMNS)
            cols[2], cols[14], cols[16] = "submitted_s", "estimated_s", "latest_s"
            rows = queued.annotate(submitted_s=_epoch("submitted_at"), estimated_s=_epoch("estimated_start_at"),
                                   latest_s=_epoch("latest_start_at")).values_list(*cols)
            return [QueuedJob(*r[:7], tuple(r[7] or ()), *r[8:]) for r in rows]
        return [QueuedJob(*r[:2], r[2].timestamp(), *r[3:7], tuple(r[7] or ()), *r[8:14],
                          r[14].timestamp() if r[14] else None, r[15], r[16].timestamp() if r[16] else None, r[17])
                for r in queued.values_list(*QUEUE_COLUMNS)]

    def held_back(self, *, now: datetime) -> tuple[dict[int, str], set[int]]:
        """:func:`apps.jobs.dependencies.dependencies_settle` over every queued job with dependencies:
        those whose dependencies can no longer be met are released ``cancelled`` at ``now`` (their ids
        the second part); the ones still waiting are the first, with their reason ("waiting for job 41
        to succeed")."""
        released: set[int] = set()
        return dependencies_settle(now=now, released=released), released

    def holds(self) -> tuple[dict[int, Hold], list[tuple[int, int]]]:
        """Open leases (those with a GPU still held) by id, and ``(gpu_id, lease_id)`` of held GPUs."""
        holds = {lease_id: Hold(node_id, rented_at.timestamp(), limit, predicted, cpus or 0, memory or 0)
                 for lease_id, node_id, rented_at, limit, predicted, cpus, memory in Lease.objects.filter(
                     lease_gpus__open=True).distinct().values_list(*HOLD_COLUMNS)}
        return holds, list(LeaseGpu.objects.filter(open=True).values_list("gpu_id", "lease_id"))

    def place(self, placements: Sequence[tuple[int, Sequence[tuple[int, Sequence[int]]]]], *,
              predicted_runtime_s: Mapping[int, float], now: datetime | None = None) -> datetime:
        """Open the placed jobs' leases and move them to rented (model instances for these only).

        ``now``: the rent time (a caller's frozen clock); None reads the clock once, when the
        locks the lease writes need are held (:func:`apps.metering.lease.lease_rent_clock`), so
        the lease's and the job's ``rented_at`` and the "rented" event carry one stamp and no wait
        is billed. Returns that stamp."""
        jobs = Job.objects.in_bulk([job_id for job_id, _ in placements])
        gpus = Gpu.objects.in_bulk([g for _, nodes in placements for _, ids in nodes for g in ids])
        node_rows = Node.objects.in_bulk([n for _, nodes in placements for n, _ in nodes])
        rent_at = now or lease_rent_clock()
        for job_id, nodes in placements:
            job = jobs[job_id]
            for rank, (node_id, gpu_ids) in enumerate(nodes):
                lease_open(job=job, node=node_rows[node_id], gpus=[gpus[g] for g in gpu_ids],
                           node_rank=rank, now=rent_at, predicted_runtime_s=predicted_runtime_s[job_id])
            where = ", ".join(f"{node_rows[n].name} ({len(ids)} GPU{'s' if len(ids) > 1 else ''})"
                              for n, ids in nodes)
            transition(job, JobState.RENTED, detail=f"rented {where}", now=rent_at)
        return rent_at

    def prestage(self, reservations: Iterable[tuple[int, list[int]]], *, now: datetime) -> set[int]:
        """:func:`apps.jobs.prestage.prestage_plan`."""
        return prestage_plan(reservations, now=now)

    def inputs(self) -> dict[int, JobInputs]:
        """Queued jobs' ``spec.data`` as cache identities (:func:`~apps.jobs.inputs.spec_input_identities`:
        an upload scoped by its owner, a URL by its credentials) and bytes: an upload's size is known; another
        source's is not before a node fetched it, so it counts ``E31_PRESTAGE_UNKNOWN_INPUT_BYTES``.
        A job's container image (``work.image``) counts as one more input of unknown size, named by
        :func:`e31_protocol.inputs.image_identity`: a node whose store holds it is preferred, and the
        image is pre-pulled (:func:`~apps.jobs.prestage.prestage_offers`).
        Reads only the ``data`` and ``work.image`` keys of the specs of queued jobs that have one."""
        rows = [(pk, owner_id, data or [], image) for pk, owner_id, data, image in Job.objects.filter(
                Q(spec__has_key="data") | Q(spec__work__has_key="image"), state=JobState.QUEUED)
                .values_list("pk", "owner_id", "spec__data", "spec__work__image") if data or image]
        upload_ids = set()
        for _pk, _owner, data, _image in rows:
            for item in data:
                source = str(item.get("source") or "")
                if source.startswith("upload:"):
                    upload_ids.add(source[len("upload:"):].strip())
        sizes: dict[str, int] = {}
        if upload_ids:
            valid = [u for u in upload_ids if is_uuid(u)]
            sizes = {f"upload:{pk}": size for pk, size in
                     Upload.objects.filter(pk__in=valid).values_list("pk", "size_bytes")}
        unknown = settings.E31_PRESTAGE_UNKNOWN_INPUT_BYTES
        out = {}
        for pk, owner_id, data, image in rows:
            total = sum(sizes.get(str(item.get("source") or ""), unknown) for item in data)
            identities = spec_input_identities(owner_id=owner_id, data=data)
            held = image_identity(str(image)) if image else None
            if held is not None:
                identities, total = (*identities, held), total + unknown
            out[pk] = JobInputs(identities, total)
        return out

    def staging_rates(self) -> dict[int, float]:
        """The rate of the newest of the last 500 leases whose job measured one, per node (bytes/s)."""
        rates: dict[int, float] = {}
        for node_id, rate in (Lease.objects.filter(job__staging_rate_bps__gt=0).order_by("-rented_at")
                              .values_list("node_id", "job__staging_rate_bps")[:500]):
            rates.setdefault(node_id, rate)
        return rates

    def write_positions(self, changed: Sequence[PositionChange]) -> None:
        """Store the rows (on PostgreSQL one ``UPDATE ... FROM unnest(...)``; elsewhere ``bulk_update``;
        only rows still queued are touched), then push one message per owner after commit."""
        if connection.vendor == "postgresql":
            table = connection.ops.quote_name(Job._meta.db_table)
            with connection.cursor() as cur:
                cur.execute(
                    f"UPDATE {table} AS j SET queue_position = v.pos, estimated_start_at = v.est, "
                    "pending_reason = v.reason, latest_start_at = v.latest FROM unnest(%s::bigint[], %s::integer[], "
                    "%s::timestamptz[], %s::text[], %s::timestamptz[]) AS v(id, pos, est, reason, latest) "
                    "WHERE j.id = v.id AND j.state = %s",
                    [[c.job_id for c in changed], [c.queue_position for c in changed],
                     [c.estimated_start_at for c in changed], [c.pending_reason for c in changed],
                     [c.latest_start_at for c in changed], JobState.QUEUED])
        else:
            jobs = [Job(pk=c.job_id, queue_position=c.queue_position, estimated_start_at=c.estimated_start_at,
                        pending_reason=c.pending_reason, latest_start_at=c.latest_start_at) for c in changed]
            Job.objects.bulk_update(jobs, ["queue_position", "estimated_start_at", "pending_reason", "latest_start_at"],
                                    batch_size=500)
        signals.queue_changed.send(sender=Job, changes=[(c.owner_id, c.job_id) for c in changed])
