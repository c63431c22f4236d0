"""``/metrics``: the site in the Prometheus text format, built at scrape time (prometheus-client).

A custom collector (https://prometheus.github.io/client_python/collector/custom/) reads the
database (:mod:`apps.ops.selectors`), the cross-process latency histograms (:mod:`apps.core.observe`)
and the Celery queues' lengths in Redis, so any web process answers for the whole site. Series
(all prefixed ``e31_``) are listed in ``docs/deploy.md``.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator

from django.conf import settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from apps.core import clock
from apps.core.choices import JobState
from apps.core.observe import BUCKETS_S, histogram

from . import selectors

log = logging.getLogger(__name__)

CELERY_QUEUES = ("core", "side")  # e31site/celery.py's task routes
HISTOGRAMS = {
    "scheduler_cycle": "Seconds one scheduling cycle took.",
    "submit": "Seconds an accepted submit took in the server (validation, admission, insert).",
    "start": "Seconds from submit to the first attempt running.",
}


def _jobs() -> Iterator[Metric]:
    by_state = selectors.jobs_by_state()
    jobs = GaugeMetricFamily("e31_jobs", "Jobs not yet released, by state.", labels=["state"])
    for state in JobState.values:
        if state != JobState.RELEASED:
            jobs.add_metric([state], by_state.get(state, 0))
    yield jobs
    released = CounterMetricFamily("e31_jobs_released", "Jobs released, by outcome.", labels=["outcome"])
    for outcome, n in sorted(selectors.released_by_outcome().items()):
        released.add_metric([outcome], n)
    yield released
    yield GaugeMetricFamily("e31_queue_length", "Jobs queued.", value=by_state.get(JobState.QUEUED, 0))
    yield GaugeMetricFamily("e31_queue_oldest_age_seconds", "Seconds the longest-queued job has waited.",
                            value=selectors.queue_oldest_age_s(clock.now()))


def _pool() -> Iterator[Metric]:
    gpus = GaugeMetricFamily("e31_gpus", "GPUs by model and state (free, leased, fenced, quarantined, down).",
                             labels=["model", "state"])
    for (model, state), n in sorted(selectors.gpus_by_model_and_state().items()):
        gpus.add_metric([model, state], n)
    yield gpus
    held = GaugeMetricFamily("e31_gpu_quarantined", "1 for each GPU held back as unclean, with its reason.",
                             labels=["node", "gpu", "reason"])
    for name, index, reason in selectors.gpus_quarantined():
        held.add_metric([name, str(index), reason], 1)
    yield held
    now = clock.now()
    states = GaugeMetricFamily("e31_node_up", "1 where the node is in this state.", labels=["node", "state"])
    drain = GaugeMetricFamily("e31_node_draining", "1 where an operator drains the node.", labels=["node"])
    age = GaugeMetricFamily("e31_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat.",
                            labels=["node"])
    util = GaugeMetricFamily("e31_gpu_utilization_ratio", "GPU utilisation in the last heartbeat (0-1).",
                             labels=["node", "gpu"])
    memory = GaugeMetricFamily("e31_gpu_memory_used_bytes", "GPU memory in use in the last heartbeat.",
                               labels=["node", "gpu"])
    ecc = GaugeMetricFamily("e31_gpu_ecc_uncorrected", "Uncorrected ECC errors the GPU reports.",
                            labels=["node", "gpu"])
    for node in selectors.nodes():
        name = node["name"]
        states.add_metric([name, node["state"]], 1)
        drain.add_metric([name], 1 if node["drain"] else 0)
        if node["last_heartbeat_at"]:
            age.add_metric([name], max(0.0, (now - node["last_heartbeat_at"]).total_seconds()))
        for gpu in (node["health"] or {}).get("gpus") or []:
            index = str(gpu.get("index", ""))
            if isinstance(gpu.get("utilization_pct"), int | float):
                util.add_metric([name, index], gpu["utilization_pct"] / 100)
            if isinstance(gpu.get("memory_used_mb"), int | float):
                memory.add_metric([name, index], gpu["memory_used_mb"] * 1024 * 1024)
            if isinstance(gpu.get("ecc_uncorrected"), int | float):
                ecc.add_metric([name, index], gpu["ecc_uncorrected"])
    yield from (states, drain, age, util, memory, ecc)


def _money_and_bundles() -> Iterator[Metric]:
    accruing, billed = selectors.spend()
    yield GaugeMetricFamily("e31_spend_rate_dollars_per_hour", "Dollars per hour the open charged leases accrue.",
                            value=float(accruing))
    yield CounterMetricFamily("e31_billed_dollars", "Dollars billed by closed charged leases.", value=float(billed))
    kept, backlog = selectors.bundles()
    yield GaugeMetricFamily("e31_bundle_bytes", "Bytes of complete output bundles kept.", value=kept)
    yield GaugeMetricFamily("e31_bundle_verification_backlog", "Bundles uploaded and waiting for verification.",
                            value=backlog)


def _latencies() -> Iterator[Metric]:
    for name, doc in HISTOGRAMS.items():
        assert name in BUCKETS_S
        h = histogram(name)
        family = HistogramMetricFamily(f"e31_{name}_seconds", doc)
        family.add_metric([], [("+Inf" if bound == float("inf") else str(bound), n) for bound, n in h.buckets],
                          sum_value=h.sum_s)
        yield family


def _celery() -> Iterator[Metric]:
    depth = GaugeMetricFamily("e31_celery_queue_length", "Tasks waiting in each Celery queue.", labels=["queue"])
    if settings.REDIS_URL and not settings.CELERY_TASK_ALWAYS_EAGER:
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            for queue in CELERY_QUEUES:
                depth.add_metric([queue], client.llen(queue))
        finally:
            client.close()
    else:  # eager tasks (make run): nothing ever waits
        for queue in CELERY_QUEUES:
            depth.add_metric([queue], 0)
    yield depth


class SiteCollector:
    """Every ``e31_*`` series, read at each scrape. A part whose source fails (Redis down) is left
    out of that scrape and counted in ``e31_metrics_errors``; the rest still answers."""

    PARTS = (_jobs, _pool, _money_and_bundles, _latencies, _celery)

    def collect(self) -> Iterator[Metric]:
        errors = 0
        for part in self.PARTS:
            try:
                yield from list(part())
            except Exception:  # a scrape reports what it can
                log.warning("metrics: %s failed", part.__name__, exc_info=True)
                errors += 1
        yield GaugeMetricFamily("e31_metrics_errors", "Parts of this scrape whose source failed.", value=errors)


def exposition() -> bytes:
    """The text exposition of every series (``text/plain; version=0.0.4``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SiteCollector())
    return generate_latest(registry)
