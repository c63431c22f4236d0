"""From a trace file to the figures: replay through the core, or read the recorded schedule."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from apps.scheduling.core import PolicyConfig, policy_resolve

from .engine import replay
from .metrics import JobOutcome, percentile, summarise
from .swf import header, load_jobs

DEFAULT_GPUS_PER_NODE = 8


def pool_shape(path: str | Path, nodes: int | None, gpus_per_node: int | None) -> tuple[int, int]:
    """Nodes and GPUs per node: as given, else from the header (``MaxNodes``, ``MaxProcs / MaxNodes``).

    Without a header, 8 GPUs a node and as many nodes as the largest job needs
    (found by the caller); here 0 nodes means "unknown".
    """
    head = header(path)

    def num(key: str) -> int | None:
        try:
            value = int(head.get(key, "").split()[0])
        except (ValueError, IndexError):
            return None
        return value if value > 0 else None

    max_nodes, max_procs = num("MaxNodes"), num("MaxProcs")
    if gpus_per_node is None:
        gpus_per_node = max_procs // max_nodes if max_nodes and max_procs and max_procs % max_nodes == 0 \
            else DEFAULT_GPUS_PER_NODE
    if nodes is None:
        nodes = max_nodes or (math.ceil(max_procs / gpus_per_node) if max_procs else 0)
    return nodes, gpus_per_node


def simulate_trace(path: str | Path, policy: str | PolicyConfig = "fifo", *, nodes: int | None = None,
                   gpus_per_node: int | None = None, limit: int | None = None, limit_records: bool = False,
                   progress: Callable[[int, int], None] | None = None, projects: bool = False) -> dict:
    """Replay the trace at ``path`` through the scheduling core and return its figures (see ``simulate``).

    ``limit_records``: see :func:`.swf.load_jobs`. ``projects`` (issue 25 item 4): each job in its
    SWF group's project (field 13) and ``e31`` ordered by the fair tree (project, then user;
    ``PolicyConfig.fairshare = "tree"``, and starved jobs by fair share, ``starved_order =
    "fairshare"``, as the live site); the figures gain the per-project ones
    (:func:`.metrics.project_figures`). Off, every user is a project of one under the policy's
    factor (a name: the core's default, ``classic``, so the earlier figures reproduce).
    """
    wall = time.perf_counter()
    nodes, gpus_per_node = pool_shape(path, nodes, gpus_per_node)
    if not nodes:
        nodes = 1 << 30  # no header: filled in below from the largest job
    jobs, skipped = load_jobs(path, gpus_per_node, nodes, limit, limit_records=limit_records, projects=projects)
    if nodes == 1 << 30:
        nodes = max((j.nodes for j in jobs), default=1)
    config = policy_resolve(policy)
    if projects:  # the live site's fair share (apps.scheduling.adapter LIVE_FAIRSHARE, LIVE_STARVED_ORDER)
        config = replace(config, fairshare="tree", starved_order="fairshare")
    result = replay(jobs, nodes, gpus_per_node, config, progress=progress)
    out = {"trace": Path(path).name, "policy": config.name,
           "nodes": nodes, "gpus_per_node": gpus_per_node, "limit": limit,
           "skipped": sum(skipped.values()), "skipped_by_reason": skipped}
    if projects:
        out["fairshare"] = config.fairshare
    out.update(summarise(result.outcomes, nodes * gpus_per_node))
    cycles_ms = [s * 1000 for s in result.cycle_s]
    out["cycles"] = len(cycles_ms)
    out["cycle_ms_p50"] = round(percentile(cycles_ms, 50), 3) if cycles_ms else None
    out["cycle_ms_p95"] = round(percentile(cycles_ms, 95), 3) if cycles_ms else None
    out["cycle_ms_max"] = round(max(cycles_ms), 3) if cycles_ms else None
    out["core_s"] = round(result.core_s, 2)
    out["wall_s"] = round(time.perf_counter() - wall, 2)
    return out


def recorded_trace(path: str | Path, *, nodes: int | None = None, gpus_per_node: int | None = None,
                   limit: int | None = None, limit_records: bool = False) -> dict:
    """The same figures from the waits the site's own scheduler recorded (field 3): a sanity anchor.

    Same jobs as a replay (same skips and limit); jobs without a recorded
    wait are left out and counted in ``unstarted``. No estimates or cycles.
    """
    wall = time.perf_counter()
    nodes, gpus_per_node = pool_shape(path, nodes, gpus_per_node)
    jobs, skipped = load_jobs(path, gpus_per_node, nodes or 1 << 30, limit, limit_records=limit_records)
    outcomes = []
    for j in jobs:
        o = JobOutcome(j.job_id, j.account, j.submit, j.gpus, j.gpus_held, j.run_s)
        if j.recorded_wait_s is not None:
            o.start = j.submit + j.recorded_wait_s
        outcomes.append(o)
    out = {"trace": Path(path).name, "policy": "recorded", "nodes": nodes, "gpus_per_node": gpus_per_node,
           "limit": limit, "skipped": sum(skipped.values()), "skipped_by_reason": skipped}
    out.update(summarise(outcomes, nodes * gpus_per_node, with_estimates=False))
    out["wall_s"] = round(time.perf_counter() - wall, 2)
    return out


def format_table(result: dict) -> str:
    """A plain-text report of one result."""
    def fmt(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            text = f"{v:,.4f}" if abs(v) < 10 else f"{v:,.1f}"
            return text.rstrip("0").rstrip(".") if "." in text else text
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = []
    for key, value in result.items():
        if key in ("by_size", "by_project"):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        lines.append(f"{key:<28} {fmt(value)}")
    sizes = result.get("by_size")
    if sizes:
        lines.append("")
        lines.append(f"{'GPUs':<6} {'jobs':>8} {'wait_mean_s':>12} {'wait_max_s':>12} {'bsld_mean':>10}")
        for cls, row in sizes.items():
            lines.append(f"{cls:<6} {fmt(row['jobs']):>8} {fmt(row['wait_mean_s']):>12} "
                         f"{fmt(row['wait_max_s']):>12} {fmt(row['bsld_mean']):>10}")
    projects = result.get("by_project")
    if projects:
        lines.append("")
        lines.append(f"{'project':<12} {'users':>6} {'jobs':>8} {'GPU-hours':>12} {'bsld_mean':>10}")
        for key, row in list(projects.items())[:20]:
            lines.append(f"{key:<12} {fmt(row['users']):>6} {fmt(row['jobs']):>8} {fmt(row['gpu_hours']):>12} "
                         f"{fmt(row['bsld_mean']):>10}")
        if len(projects) > 20:
            lines.append(f"... and {len(projects) - 20} more projects (--format json has them all)")
    return "\n".join(lines)
