"""Trace simulator (SPEC §5): replays SWF workload traces through the scheduling core
(:mod:`apps.scheduling.core`) with a simulated clock, and measures the schedule.

Pure Python, no Django: ``manage.py simulate`` and ``benchmarks/policies.py``
are thin shells around :func:`simulate_trace`.
"""
from .engine import Replay, UsageBook, expected_end, predict_runtime, replay
from .metrics import JobOutcome, bounded_slowdown, jain_index, percentile, size_class, summarise
from .runner import format_table, pool_shape, recorded_trace, simulate_trace
from .swf import SwfRecord, TraceJob, load_jobs, map_job, parse_line, read_swf, skip_reason

__all__ = ["JobOutcome", "Replay", "SwfRecord", "TraceJob", "UsageBook", "bounded_slowdown", "expected_end",
           "format_table", "jain_index", "load_jobs", "map_job", "parse_line", "percentile", "pool_shape",
           "predict_runtime", "read_swf", "recorded_trace", "replay", "simulate_trace", "size_class",
           "skip_reason", "summarise"]
