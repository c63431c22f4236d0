"""The job page's "Usage" card: what the agent sampled of the run (CPU, memory, GPU), as peaks
in words for every reader and as charts drawn by ``static/js/job-usage.js`` from the API's
``metrics/`` (:func:`apps.jobs.services.samples.samples_series`)."""
from __future__ import annotations

from typing import Any

from django.urls import reverse

from apps.core.choices import JobState
from apps.jobs.models import Job
from apps.jobs.services.samples import samples_series

# The card's words when there is nothing to chart, by where the job is.
EMPTY_WAITING = "No samples yet: the charts start when the job runs."
EMPTY_RUNNING = "No samples yet: the first arrive within about 15 seconds of the start."
EMPTY_ENDED = ("No usage was sampled for this run: it ended within a second, ran before sampling, or "
               "ran on a node whose agent does not sample.")
SIMULATED_NOTE = "This node's GPUs are simulated: no GPU figures are shown, only CPU and memory."
NO_NVML_NOTE = "GPU figures could not be read on this node (no NVML): only CPU and memory are shown."


def usage_card(job: Job) -> dict[str, Any]:
    """The card's context: ``{"has_samples", "live", "empty_text", "gpu_note", "peaks",
    "metrics_url"}``.

    ``live``: the run may still send samples (the page re-reads the series every 15 s);
    ``peaks``: ``[(label, text)]`` highest CPU (percent of one CPU), memory (bytes) and per GPU
    utilisation (percent) and memory (bytes) over the attempt's samples; ``gpu_note`` says why
    GPU series are absent (a simulated node, or no NVML), "" when they are there or not needed.
    """
    series = samples_series(job)
    nodes = series["nodes"]
    live = job.state in (JobState.RENTED, JobState.RUNNING)
    if nodes:
        empty = ""
    elif live and job.run_started_at is not None:
        empty = EMPTY_RUNNING
    elif job.run_started_at is None and job.state != JobState.RELEASED:
        empty = EMPTY_WAITING
    else:
        empty = EMPTY_ENDED
    sources = {n["gpu_source"] for n in nodes}
    note = SIMULATED_NOTE if "simulated" in sources else NO_NVML_NOTE if "none" in sources and job.gpus_per_node else ""
    return {"has_samples": bool(nodes), "live": live, "empty_text": empty, "gpu_note": note,
            "peaks": _peaks(nodes, multi=job.nodes > 1),
            "metrics_url": reverse("api:job-metrics", args=[job.pk])}


def _peaks(nodes: list[dict[str, Any]], *, multi: bool) -> list[dict[str, Any]]:
    """Per node rank: ``{"label", "cpu_percent", "rss_bytes", "gpus": [{"index", "util", "memory"}]}``."""
    out = []
    for node in nodes:
        gpus = []
        for gpu in node["gpus"]:
            utils = [v for v in gpu["gpu_util_percent"] if v is not None]
            mems = [v for v in gpu["gpu_memory_bytes"] if v is not None]
            gpus.append({"index": gpu["index"], "util": max(utils) if utils else None,
                         "memory": max(mems) if mems else None})
        out.append({"label": f"Node rank {node['node_rank']}" if multi else "",
                    "samples": len(node["at_epoch_s"]),
                    "cpu_percent": max(node["cpu_percent"]), "rss_bytes": max(node["rss_bytes"]), "gpus": gpus})
    return out
