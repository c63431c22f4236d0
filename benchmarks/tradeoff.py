"""The e31 trade-off (issue 14 item 4): mean bsld against the worst account and the 9+ GPU tail,
for a few settings of the policy, next to easy, on one trace; a chart (SVG) and a JSON.

    .venv/bin/python benchmarks/tradeoff.py --trace kth --limit 20000 --workers 2 \\
        --out docs/img/tradeoff-kth-20000.svg --json var/tradeoff-kth-20000.json
    .venv/bin/python benchmarks/tradeoff.py --trace sdsc --settings easy,defaults \\
        --set 'weight_size=2000={"weight_size": 2000}'

Each setting is a :class:`~apps.scheduling.core.PolicyConfig` override of the defaults (the
``E31_POLICY_<FIELD>`` overrides of the live site).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policies import TRACES, trace_path  # noqa: E402

from apps.scheduling.core import PolicyConfig  # noqa: E402
from apps.scheduling.simulator import simulate_trace  # noqa: E402

SETTINGS = {
    "defaults": {},
    "before": {"weight_size": 0.0, "backfill_order": "shortest", "starvation_s": 6 * 3600.0},  # until 2026-12-02
    "weight_size=0": {"weight_size": 0.0},
    "weight_size=1000": {"weight_size": 1000.0},
    "starvation_s=6h": {"starvation_s": 6 * 3600.0},
    "starvation_s=24h": {"starvation_s": 24 * 3600.0},
    "backfill_order=shortest": {"backfill_order": "shortest"},
    "reservation_depth=2": {"reservation_depth": 2},
    "weight_slowdown=0": {"weight_slowdown": 0.0},
    "keep_bounds=off": {"keep_bounds": False},
    "bound_slack_s=1h": {"bound_slack_s": 3600.0},
    "guard_after_s=0": {"guard_after_s": 0.0},
    "starved_order=widest": {"starved_order": "widest"},  # slow: most starts it tries fail the promise check
}
CHARTED = [s for s in SETTINGS if s not in ("guard_after_s=0", "starved_order=widest")]


def run(trace: str, label: str, limit: int | None, override: dict | None = None) -> dict:
    _name, nodes, gpus = TRACES[trace]
    override = SETTINGS.get(label, {}) if override is None else override
    policy = "easy" if label == "easy" else dataclasses.replace(PolicyConfig(name="e31"), **override)
    r = simulate_trace(trace_path(trace), policy, nodes=nodes, gpus_per_node=gpus, limit=limit)
    return {"setting": label, "bsld": r["bsld_mean"], "worst": r["worst_account_bsld"],
            "tail9": (r["by_size"].get("9+") or {}).get("wait_max_s"), "util": r["utilisation"],
            "est60": r["estimate_within_60s"], "bound_passed": r["bound_passed"]}


def chart(rows: list[dict], path: Path, title: str) -> None:
    """Two panels: bsld against worst account, bsld against the 9+ tail; easy marked."""
    import matplotlib  # heavy optional dependency: only for the chart

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    panels = ((axes[0], "worst", "worst account mean bsld"), (axes[1], "tail9", "9+ GPU longest wait (s)"))
    base = next((r for r in rows if r["setting"] == "easy"), None)
    for ax, key, label in panels:
        if base is not None:  # the goals: left of 0.7x easy's bsld, at or under easy's figure
            ax.axvline(0.7 * base["bsld"], color="grey", linestyle=":", linewidth=0.8)
            ax.axhline(base[key], color="grey", linestyle="--", linewidth=0.8)
        for r in rows:
            easy = r["setting"] == "easy"
            ax.scatter(r["bsld"], r[key], marker="s" if easy else "o", color="black" if easy else "tab:blue")
            ax.annotate(r["setting"], (r["bsld"], r[key]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("mean bounded slowdown")
        ax.set_ylabel(label)
    fig.suptitle(f"{title}\n(goals: left of the dotted line, on or under the dashed one)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="kth", choices=sorted(TRACES))
    parser.add_argument("--limit", type=int, default=20000)
    parser.add_argument("--settings", default=",".join(["easy", *CHARTED]))
    parser.add_argument("--set", action="append", default=[], metavar="LABEL=JSON",
                        help='one more setting, e.g. \'ws2000={"weight_size": 2000}\' (repeatable)')
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="the chart (.svg or .png)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--replot", type=Path, metavar="JSON", help="draw --out from a --json of an earlier run")
    a = parser.parse_args()
    if a.replot:
        if not a.out:
            parser.error("--replot needs --out")
        chart(json.loads(a.replot.read_text()), a.out, f"{a.trace}, first {a.limit:,} jobs: e31 settings and easy")
        return
    labels = [s.strip() for s in a.settings.split(",") if s.strip()]
    unknown = [label for label in labels if label != "easy" and label not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: easy, {', '.join(SETTINGS)}")
    overrides = [SETTINGS.get(label, {}) for label in labels]
    for item in a.set:
        cut = item.find("={")  # a label may hold "=" itself: "weight_size=2000={...}"
        label, raw = item[:cut], item[cut + 1:]
        try:
            if cut <= 0:
                raise ValueError("no '={'")
            overrides.append(json.loads(raw))
        except ValueError as e:
            parser.error(f"--set {item!r}: not LABEL=JSON ({e})")
        labels.append(label)
    trace_path(a.trace)
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        rows = list(pool.map(run, [a.trace] * len(labels), labels, [a.limit or None] * len(labels), overrides))
    for r in rows:
        print(json.dumps(r))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1))
    if a.out:
        chart(rows, a.out, f"{a.trace}, first {a.limit:,} jobs: e31 settings and easy")


if __name__ == "__main__":
    main()
