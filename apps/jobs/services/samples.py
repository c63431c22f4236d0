"""Usage samples of running jobs (CPU, memory, GPU) for the job's charts: stored as the agents
send them, bounded per attempt and rank, and read back as series (SPEC §7, ``metrics/``).

Bound: at most ``E31_JOB_SAMPLES_MAX`` samples (default 1000) per (job, attempt, node rank).
When a post takes the count past it, every other stored sample is deleted (the first and the
newest kept), halving the resolution of the whole run rather than losing its start or its end:
at the agent's 5 s a run keeps every sample for its first 83 minutes, then one in two (10 s,
then 20 s, ...) over the whole run; storage stays O(cap) however long the job runs.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from apps.jobs.models import Job, JobSample


def samples_store(*, job_id: int, attempt: int, rank: int, gpu_source: str, samples: list[dict[str, Any]],
                  now: datetime) -> int:
    """Store the samples an agent posted for its rank of the attempt; the caller checked that the
    sender holds that rank of the attempt (:func:`apps.agent_api.samples.agent_samples_store`).

    ``samples``: ``[{"seq", "ago_s", "cpu_percent", "rss_bytes", "gpus"?}]`` as validated by
    the agent API (``ago_s`` seconds before ``now``; ``gpus`` kept only when ``gpu_source`` is
    ``nvml``). A seq already stored is skipped (a resent post changes nothing). Then the
    stored samples are thinned to the cap (module docstring).

    Returns how many of ``samples`` were newly stored.
    """
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job_id).first()  # one writer per job at a time
        mine = JobSample.objects.filter(job_id=job_id, attempt=attempt, node_rank=rank)
        have = set(mine.filter(seq__in=[s["seq"] for s in samples]).values_list("seq", flat=True))
        rows, seen = [], set(have)
        for s in samples:
            if s["seq"] in seen:
                continue
            seen.add(s["seq"])
            gpus = [dict(g) for g in s.get("gpus") or []] if gpu_source == "nvml" else []
            rows.append(JobSample(job_id=job_id, attempt=attempt, node_rank=rank, seq=s["seq"],
                                  at=now - timedelta(seconds=float(s["ago_s"])), cpu_percent=float(s["cpu_percent"]),
                                  rss_bytes=int(s["rss_bytes"]), gpu_source=gpu_source, gpus=gpus))
        JobSample.objects.bulk_create(rows, ignore_conflicts=True)
        cap = max(2, int(settings.E31_JOB_SAMPLES_MAX))
        if mine.count() > cap:
            seqs = list(mine.order_by("seq").values_list("seq", flat=True))
            mine.filter(seq__in=seqs[1:-1:2]).delete()
    return len(rows)


def samples_series(job: Job, attempt: int | None = None) -> dict[str, Any]:
    """The usage series of ``attempt`` (default: the job's current one), one entry per node rank
    that sent samples, ranks in order; each series in time order (the API's ``metrics/``)::

        {"job_id", "attempt", "samples_max",
         "nodes": [{"node_rank", "gpu_source": "nvml" | "simulated" | "none",
                    "at_epoch_s": [seconds since 1970, ...], "cpu_percent": [...],
                    "rss_bytes": [...],
                    "gpus": [{"index", "gpu_util_percent": [...], "gpu_memory_bytes": [...]}]}]}

    The arrays of one node are aligned (a GPU missing from a sample, or a figure NVML could
    not read, is ``None``). ``gpus`` is empty unless the node read real GPUs (``gpu_source``
    ``nvml``: figures are never made up for a simulated node). ``nodes`` is empty when nothing
    was sampled (a job that has not run yet, or ran before sampling or on an older agent).
    """
    attempt = job.attempt if attempt is None else attempt
    rows = (JobSample.objects.filter(job=job, attempt=attempt).order_by("node_rank", "seq")
            .values_list("node_rank", "at", "cpu_percent", "rss_bytes", "gpu_source", "gpus"))
    nodes: dict[int, dict[str, Any]] = {}
    gpu_rows: dict[int, list[list[dict[str, Any]]]] = {}
    for rank, at, cpu, rss, source, gpus in rows:
        node = nodes.setdefault(rank, {"node_rank": rank, "gpu_source": source, "at_epoch_s": [],
                                       "cpu_percent": [], "rss_bytes": [], "gpus": []})
        node["gpu_source"] = source  # the latest sample's word
        node["at_epoch_s"].append(round(at.timestamp(), 3))
        node["cpu_percent"].append(cpu)
        node["rss_bytes"].append(rss)
        gpu_rows.setdefault(rank, []).append(gpus if isinstance(gpus, list) else [])
    for rank, node in nodes.items():
        per_sample = gpu_rows[rank]
        indexes = sorted({int(g["index"]) for sample in per_sample for g in sample if "index" in g})
        for index in indexes:
            by_sample = [next((g for g in sample if g.get("index") == index), {}) for sample in per_sample]
            node["gpus"].append({"index": index,
                                 "gpu_util_percent": [g.get("gpu_util_percent") for g in by_sample],
                                 "gpu_memory_bytes": [g.get("gpu_memory_bytes") for g in by_sample]})
    return {"job_id": job.pk, "attempt": attempt, "samples_max": int(settings.E31_JOB_SAMPLES_MAX),
            "nodes": [nodes[r] for r in sorted(nodes)]}
