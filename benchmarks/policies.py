"""Scheduling policies on real traces: fifo, easy and e31 through the trace simulator,
next to the schedule each site's own scheduler recorded (SPEC §5).

Traces (Parallel Workloads Archive, /work/shared/traces): KTH-SP2 on 100
nodes of 1 GPU (KTH ran EASY backfilling: its recorded waits are what EASY
achieved there) and SDSC-BLUE on 144 nodes of 8 GPUs. Each trace x policy
replay runs in its own process. ``recorded`` computes the same figures from
the waits written in the trace (field 3), same jobs, no estimates.

    .venv/bin/python benchmarks/policies.py                      # --limit 20000, all policies and traces
    .venv/bin/python benchmarks/policies.py --limit 0            # full traces (slow)
    .venv/bin/python benchmarks/policies.py --policies fifo,easy --traces kth --out var/policies.json
    # issue 14: the goals (e31 against easy) on both traces and generated workloads, met or not
    .venv/bin/python benchmarks/policies.py --policies easy,e31 --no-recorded --goals \
        --traces kth,sdsc,gen-small,gen-huge,gen-bursty --out var/goals.json
    # issue 25 item 4: SWF field 13 (the group) as the project, e31 by the fair tree; per-project figures
    .venv/bin/python benchmarks/policies.py --policies easy,e31 --no-recorded --projects --traces kth,cea
    # issue 14 item 5: staging GPU-hours, cache hit rate, utilisation; pre-staging x cache affinity
    .venv/bin/python benchmarks/policies.py --data --policies e31 --traces kth,sdsc --limit 5000

Generated workloads (``gen-SHAPE``, :mod:`apps.scheduling.simulator.generate`) are written to
``var/generated/`` (64 nodes of 8 GPUs, ``--gen-jobs`` jobs) and replayed like a trace.
``--goals`` also replays the independent EASY of ``benchmarks/easy_reference.py`` on the real
traces and checks ``easy`` against it (0.1 % of mean bsld).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import easy_reference  # noqa: E402

from apps.scheduling.core import schedule  # noqa: E402
from apps.scheduling.simulator import recorded_trace, simulate_trace  # noqa: E402
from apps.scheduling.simulator.generate import SHAPES, write_swf  # noqa: E402
from apps.scheduling.simulator.staging import format_data_table, simulate_data  # noqa: E402

TRACE_DIR = Path(os.environ.get("E31_TRACES", "/work/shared/traces"))
TRACES = {
    "kth": ("KTH-SP2-1996-2.1-cln.swf.gz", 100, 1),
    "sdsc": ("SDSC-BLUE-2000-4.2-cln.swf.gz", 144, 8),
    "llnl": ("LLNL-Thunder-2007-1.1-cln.swf.gz", 1002, 4),  # no groups (field 13 is -1)
    "cea": ("CEA-Curie-2011-2.1-cln.swf.gz", 5544, 16),  # 5,040 thin nodes of 16 cores (the header's note)
    **{f"gen-{shape}": (f"generated/{shape}.swf", 64, 8) for shape in SHAPES},
}
GEN_DIR = ROOT / "var"
GEN_JOBS = 4000
# Issue 14 goals, e31 against easy on the same trace: (key, label, test(e31, easy) -> bool, how it is read)
GOALS = [
    ("bsld", "mean bsld <= 0.7x easy", lambda r, e: r["bsld_mean"] <= 0.7 * e["bsld_mean"],
     lambda r: r["bsld_mean"]),
    ("worst", "worst account bsld <= easy", lambda r, e: r["worst_account_bsld"] <= e["worst_account_bsld"],
     lambda r: r["worst_account_bsld"]),
    ("tail9", "9+ GPU longest wait <= easy", lambda r, e: _tail(r) <= _tail(e), lambda r: _tail(r)),
    ("util", "utilisation >= easy - 1 point", lambda r, e: r["utilisation"] >= e["utilisation"] - 0.01,
     lambda r: r["utilisation"]),
    ("est60", "first likely estimates within 60 s >= 65 %", lambda r, e: r["estimate_within_60s"] >= 0.65,
     lambda r: r["estimate_within_60s"]),
    ("bound", "no-later-than bound never passed", lambda r, e: r["bound_passed"] == 0,
     lambda r: r["bound_passed"]),
]


def _tail(r: dict) -> float:
    return ((r.get("by_size") or {}).get("9+") or {}).get("wait_max_s") or 0.0


def goals(results: list[dict]) -> list[dict]:
    """One row per (trace, goal): e31's figure, easy's, met or not (None where a figure is missing)."""
    by = {(r.get("trace_key"), r.get("policy")): r for r in results if "error" not in r}
    rows = []
    for trace in dict.fromkeys(r.get("trace_key") for r in results):
        e31, easy = by.get((trace, "e31")), by.get((trace, "easy"))
        if not e31 or not easy:
            continue
        for key, label, test, read in GOALS:
            try:
                met = bool(test(e31, easy))
            except (TypeError, KeyError):
                met = None
            rows.append({"trace": trace, "goal": key, "label": label, "e31": read(e31), "easy": read(easy),
                         "met": met})
        ref = by.get((trace, "reference"))
        if ref:
            diff = abs(easy["bsld_mean"] - ref["reference_bsld"]) / ref["reference_bsld"]
            rows.append({"trace": trace, "goal": "easy_ref", "label": "easy = independent EASY (0.1 % bsld)",
                         "e31": None, "easy": easy["bsld_mean"], "reference": ref["reference_bsld"],
                         "relative_difference": round(diff, 6), "met": diff <= 0.001})
    return rows


def goals_table(rows: list[dict]) -> str:
    """Markdown: trace, goal, e31, easy, met."""
    lines = ["| trace | goal | e31 | easy | met |", "|---|---|---|---|---|"]
    for g in rows:
        e31 = "-" if g["e31"] is None else f"{g['e31']:,.4g}" if isinstance(g["e31"], float) else f"{g['e31']:,}"
        easy = g["easy"] if g["goal"] != "easy_ref" else f"{g['easy']} (reference {g['reference']})"
        easy = f"{easy:,.4g}" if isinstance(easy, float) else str(easy)
        met = {True: "met", False: "not met", None: "-"}[g["met"]]
        lines.append(f"| {g['trace']} | {g['label']} | {e31} | {easy} | {met} |")
    return "\n".join(lines)
POLICIES = ("fifo", "easy", "e31")
COLUMNS = [  # (key, header, format)
    ("trace", "trace", "short"), ("policy", "policy", "{}"), ("jobs", "jobs", "{:,}"),
    ("utilisation", "util", "{:.3f}"), ("wait_mean_s", "wait mean s", "{:,.0f}"),
    ("wait_p50_s", "p50 s", "{:,.0f}"), ("wait_p95_s", "p95 s", "{:,.0f}"), ("wait_max_s", "max s", "{:,.0f}"),
    ("bsld_mean", "bsld", "{:.2f}"), ("bsld_p95", "bsld p95", "{:.1f}"),
    ("worst_account_bsld", "worst acct", "{:.1f}"), ("jain_accounts", "jain", "{:.3f}"),
    ("projects", "projects", "{:,}"), ("worst_project_bsld", "worst proj", "{:.1f}"),
    ("jain_projects", "jain proj", "{:.3f}"),
    ("estimate_within_60s", "est<=60s", "{:.3f}"), ("estimate_within_60s_waited", "est<=60s w", "{:.3f}"),
    ("estimate_abs_error_median_s", "est err p50 s", "{:,.0f}"),
    ("estimate_abs_error_median_waited_s", "est err p50 w s", "{:,.0f}"),
    ("estimate_waited_within", "est ok w10m", "{:.3f}"), ("estimate_waited_before", "before w10m", "{:.3f}"),
    ("cycle_ms_p50", "cycle p50 ms", "{:.2f}"), ("cycle_ms_max", "cycle max ms", "{:,.1f}"),
    ("wall_s", "wall s", "{:,.1f}"),
]
SIZE_COLUMNS = ("1", "2-8", "9+")


def available(policy: str) -> bool:
    """True if the scheduling core knows ``policy``."""
    try:
        schedule([], [], 0.0, policy)
    except ValueError:
        return False
    return True


def trace_path(trace: str, gen_jobs: int = GEN_JOBS) -> Path:
    """The file of ``trace``: a real trace, or a generated workload written on first use."""
    name, nodes, gpus = TRACES[trace]
    if not trace.startswith("gen-"):
        return TRACE_DIR / name
    path = GEN_DIR / name.replace(".swf", f"-{gen_jobs}.swf")
    if not path.exists():
        write_swf(path, trace[4:], nodes=nodes, gpus_per_node=gpus, jobs=gen_jobs)
    return path


def run_one(trace: str, policy: str, limit: int | None, gen_jobs: int = GEN_JOBS, projects: bool = False) -> dict:
    """One replay (or the recorded schedule, or the independent EASY) of ``trace``; ``projects``:
    the SWF group is the project and ``e31`` shares by the fair tree (issue 25 item 4)."""
    _name, nodes, gpus = TRACES[trace]
    path = trace_path(trace, gen_jobs)
    if policy == "reference":
        jobs = easy_reference.read_jobs(path, gpus, nodes, limit)
        bsld, wait = easy_reference.bsld_mean(jobs, easy_reference.easy(jobs, nodes, gpus))
        return {"trace": path.name, "policy": policy, "trace_key": trace, "reference_bsld": bsld,
                "reference_wait_mean_s": wait}
    if policy == "recorded":
        out = recorded_trace(path, nodes=nodes, gpus_per_node=gpus, limit=limit)
    else:
        out = simulate_trace(path, policy, nodes=nodes, gpus_per_node=gpus, limit=limit, projects=projects)
    out["trace_key"] = trace
    return out


def short(trace: str) -> str:
    """``KTH-SP2-1996-2.1-cln.swf.gz`` -> ``KTH-SP2``."""
    return "-".join(trace.split("-")[:2])


def fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    if spec == "short":
        return short(str(value))
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def table(results: list[dict]) -> str:
    """Markdown table: the main figures, then bounded slowdown by job size."""
    head = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    for r in results:
        lines.append("| " + " | ".join(fmt(r.get(k), f) for k, _, f in COLUMNS) + " |")
    lines += ["", "| trace | policy | " + " | ".join(f"{c} GPUs: jobs / wait mean s / bsld" for c in SIZE_COLUMNS)
              + " |", "|---|---|" + "---|" * len(SIZE_COLUMNS)]
    for r in results:
        cells = []
        for c in SIZE_COLUMNS:
            row = (r.get("by_size") or {}).get(c) or {}
            cells.append(f"{fmt(row.get('jobs'), '{:,}')} / {fmt(row.get('wait_mean_s'), '{:,.0f}')} / "
                         f"{fmt(row.get('bsld_mean'), '{:.2f}')}")
        lines.append(f"| {short(r['trace'])} | {r['policy']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def project_table(results: list[dict]) -> str:
    """Markdown, issue 25 item 4: per trace, the worst project's mean bsld and Jain's index over the
    projects' mean bsld, each policy against ``easy`` (replays with ``--projects`` only)."""
    by = {(r.get("trace_key"), r.get("policy")): r for r in results if "error" not in r}
    lines = ["| trace | policy | projects | worst project bsld | / easy | Jain over projects | "
             "worst account bsld | Jain over accounts |", "|---|---|---|---|---|---|---|---|"]
    for (trace, policy), r in by.items():
        if r.get("worst_project_bsld") is None:
            continue
        easy = (by.get((trace, "easy")) or {}).get("worst_project_bsld")
        ratio = f"{r['worst_project_bsld'] / easy:.2f}x" if easy else "-"
        lines.append(f"| {short(r['trace'])} | {policy} | {fmt(r.get('projects'), '{:,}')} | "
                     f"{fmt(r['worst_project_bsld'], '{:.1f}')} | {ratio} | {fmt(r.get('jain_projects'), '{:.3f}')} | "
                     f"{fmt(r.get('worst_account_bsld'), '{:.1f}')} | {fmt(r.get('jain_accounts'), '{:.3f}')} |")
    return "\n".join(lines)


def run_data(trace: str, policy: str, limit: int | None, gen_jobs: int = GEN_JOBS) -> dict:
    _name, nodes, gpus = TRACES[trace]
    return simulate_data(trace_path(trace, gen_jobs), policy, nodes=nodes, gpus_per_node=gpus, limit=limit)


def data_main(traces: list[str], policy: str, limit: int | None, args: argparse.Namespace) -> dict:
    """``--data``: the four data rows of each trace (:func:`apps.scheduling.simulator.staging.simulate_data`)."""
    for t in traces:
        trace_path(t, args.gen_jobs)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        futures = {t: pool.submit(run_data, t, policy, limit, args.gen_jobs) for t in traces}
        results = [futures[t].result() for t in traces]
    for r in results:
        print(format_data_table(r) + "\n")
    report = {"benchmark": "policies-data", "limit": limit, "wall_s": round(time.perf_counter() - started, 1),
              "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return report


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=20000, help="first N jobs of each trace; 0 = whole trace")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma list of fifo, easy, e31")
    parser.add_argument("--traces", default="kth,sdsc," + ",".join(t for t in TRACES if t.startswith("gen-")),
                        help="comma list of " + ", ".join(TRACES))
    parser.add_argument("--no-recorded", action="store_true", help="leave out the recorded schedules")
    parser.add_argument("--workers", type=int, default=min(6, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--goals", action="store_true", help="print issue 14's goals, e31 against easy, met or not")
    parser.add_argument("--projects", action="store_true", help="issue 25 item 4: SWF field 13 (the group) is "
                        "the project and e31 shares by project, then user (fair tree); prints per-project figures")
    parser.add_argument("--gen-jobs", type=int, default=GEN_JOBS, help="jobs of each generated workload")
    parser.add_argument("--data", action="store_true", help="issue 14 item 5: pre-staging and cache affinity on "
                        "generated input data (four replays per trace, the first policy named); see --data of "
                        "manage.py simulate")
    args = parser.parse_args()
    limit = args.limit or None
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        parser.error(f"unknown trace(s) {unknown}; known: {', '.join(TRACES)}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    missing = [p for p in policies if not available(p)]
    for p in missing:
        print(f"policy {p!r} is not in the scheduling core yet: left out", file=sys.stderr)
    policies = [p for p in policies if p not in missing]
    if args.data:
        return data_main(traces, policies[0] if policies else "e31", limit, args)
    runs = [(t, p) for t in traces for p in ([] if args.no_recorded or t.startswith("gen-") else ["recorded"])
            + policies]
    if args.goals:
        runs += [(t, "reference") for t in traces if not t.startswith("gen-")]
    for t in traces:
        trace_path(t, args.gen_jobs)  # generate once, before the workers start
    started = time.perf_counter()
    results: dict[tuple[str, str], dict] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        futures = {pool.submit(run_one, t, p, limit, args.gen_jobs, args.projects): (t, p) for t, p in runs}
        for fut in as_completed(futures):
            t, p = futures[fut]
            try:
                results[(t, p)] = fut.result()
            except Exception as exc:  # one failed run should not lose the others
                results[(t, p)] = {"trace": TRACES[t][0], "policy": p, "error": repr(exc)}
            print(f"done {t} {p} ({time.perf_counter() - started:,.0f} s)", file=sys.stderr)
    ordered = [results[k] for k in runs]
    print(table([r for r in ordered if "error" not in r and r["policy"] != "reference"]))
    if args.projects:
        print()
        print(project_table(ordered))
    for r in ordered:
        if "error" in r:
            print(f"\n{r['trace']} {r['policy']}: FAILED {r['error']}")
    report = {"benchmark": "policies", "limit": limit, "missing_policies": missing,
              "wall_s": round(time.perf_counter() - started, 1), "results": ordered}
    if args.goals:
        report["goals"] = goals(ordered)
        print()
        print(goals_table(report["goals"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
