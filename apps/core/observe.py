"""Latency histograms that every process of the site adds to and ``/metrics`` reads (issue 26).

A scheduling cycle runs in a Celery worker and a submit in a web process, but Prometheus scrapes one
web process: so the buckets live in Redis (one hash per histogram, ``HINCRBY``/``HINCRBYFLOAT`` on
each observation, cumulative from the first observation on), shared by every process on
``REDIS_URL``. Without Redis (``make run``: one process) they live in this process. An observation
never fails its caller: a Redis error drops it, logged at debug.

Buckets are upper bounds in seconds, as Prometheus histograms count them
(https://prometheus.io/docs/practices/histograms/); ``+Inf`` is the count.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from django.conf import settings

log = logging.getLogger(__name__)

BUCKETS_S: dict[str, tuple[float, ...]] = {
    "scheduler_cycle": (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    "submit": (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    "start": (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 14400.0, 86400.0),
}
_KEY = "e31:histogram:{name}"
_local: dict[str, dict[str, float]] = {}
_local_lock = threading.Lock()
_client = None


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are ``(upper bound in seconds, observations <= it)``, the last
    ``(inf, count)``; ``sum_s`` the total of the observed seconds."""

    buckets: tuple[tuple[float, int], ...]
    sum_s: float
    count: int


def _redis():
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0, socket_connect_timeout=1.0)
    return _client


def _fields(name: str, seconds: float) -> list[str]:
    return [str(bound) for bound in BUCKETS_S[name] if seconds <= bound] + ["+Inf"]


def observe(name: str, seconds: float) -> None:
    """Add one observation of ``seconds`` to histogram ``name`` (a key of :data:`BUCKETS_S`).

    Raises:
        KeyError: ``name`` is not a known histogram (a programming error, not a runtime one).
    """
    fields = _fields(name, max(0.0, seconds))
    if not settings.REDIS_URL:
        with _local_lock:
            counts = _local.setdefault(name, {})
            for field in fields:
                counts[field] = counts.get(field, 0) + 1
            counts["sum"] = counts.get("sum", 0.0) + seconds
        return
    try:
        pipe = _redis().pipeline(transaction=False)
        key = _KEY.format(name=name)
        for field in fields:
            pipe.hincrby(key, field, 1)
        pipe.hincrbyfloat(key, "sum", max(0.0, seconds))
        pipe.execute()
    except Exception:  # an observation never fails the cycle or the submit that made it
        log.debug("histogram %s: observation dropped", name, exc_info=True)


def histogram(name: str) -> Histogram:
    """Histogram ``name`` as every process added to it (zeros before the first observation).

    Raises:
        redis.RedisError: Redis does not answer (``/metrics`` then leaves the histogram out).
    """
    if settings.REDIS_URL:
        raw = {k.decode(): float(v) for k, v in _redis().hgetall(_KEY.format(name=name)).items()}
    else:
        with _local_lock:
            raw = dict(_local.get(name, {}))
    bounds = BUCKETS_S[name]
    buckets = tuple((bound, int(raw.get(str(bound), 0))) for bound in bounds)
    count = int(raw.get("+Inf", 0))
    return Histogram(buckets=(*buckets, (float("inf"), count)), sum_s=raw.get("sum", 0.0), count=count)
