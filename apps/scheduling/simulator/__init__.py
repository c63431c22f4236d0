"""Trace simulator (SPEC §5): replays SWF workload traces through the scheduling core
(:mod:`apps.scheduling.core`) with a simulated clock, and measures the schedule.

Pure Python, no Django: ``manage.py simulate`` and ``benchmarks/policies.py``
are thin shells around :func:`simulate_trace`.
"""
from .engine import Replay, ReplayJob, ReplayResult, replay, replay_jobs, sim_nodes
from .metrics import JobOutcome, bounded_slowdown, jain_index, percentile, size_class, summarise
from .runner import format_table, pool_shape, recorded_trace, simulate_trace
from .swf import SwfRecord, TraceJob, load_jobs, map_job, parse_line, read_swf, skip_reason

__all__ = ["JobOutcome", "Replay", "ReplayJob", "ReplayResult", "SwfRecord", "TraceJob", "bounded_slowdown",
           "format_table", "jain_index", "load_jobs", "map_job", "parse_line", "percentile", "pool_shape",
           "read_swf", "recorded_trace", "replay", "replay_jobs", "sim_nodes", "simulate_trace", "size_class",
           "skip_reason", "summarise"]
