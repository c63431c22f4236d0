"""The three steps of examples/pipeline (pipeline.yaml): preprocess, train (a job array, one fold a
task) and evaluate. Standard library only; each step runs in well under a second.

The data: 400 points of y = 3x + 2 with Gaussian noise (sd 0.5), drawn from SEED. A job starts in
an empty directory with only its uploaded files (outputs do not flow from one job to the next), so
every step draws the same points from the same SEED instead of reading the step before's files.

  preprocess   writes prepared/data.csv and prepared/stats.json (the points, their means and spread)
  train        task i of N holds fold i out, fits a least-squares line on the rest, writes
               result.json (slope, intercept, held-out RMSE); FAIL_TASK=i makes task i fail (exit 3)
  evaluate     fits on every point, checks the fit against the truth, writes report.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from pathlib import Path

POINTS = 400
TRUE_SLOPE, TRUE_INTERCEPT, NOISE_SD = 3.0, 2.0, 0.5


def banner(step: str) -> None:
    print(f"step {step}: " + " ".join(f"{k}={os.environ.get(k, '')}" for k in (
        "E31_JOB_ID", "E31_NODE_RANK", "E31_NUM_NODES", "CUDA_VISIBLE_DEVICES", "E31_ARRAY_INDEX", "E31_ARRAY_SIZE")),
        flush=True)


def points(seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(POINTS):
        x = rng.uniform(-5.0, 5.0)
        out.append((x, TRUE_SLOPE * x + TRUE_INTERCEPT + rng.gauss(0.0, NOISE_SD)))
    return out


def fit(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares: (slope, intercept)."""
    n = len(rows)
    mx = sum(x for x, _ in rows) / n
    my = sum(y for _, y in rows) / n
    sxx = sum((x - mx) ** 2 for x, _ in rows)
    sxy = sum((x - mx) * (y - my) for x, y in rows)
    slope = sxy / sxx
    return slope, my - slope * mx


def rmse(rows: list[tuple[float, float]], slope: float, intercept: float) -> float:
    return math.sqrt(sum((y - (slope * x + intercept)) ** 2 for x, y in rows) / len(rows))


def preprocess(seed: int) -> None:
    rows = points(seed)
    out = Path("prepared")
    out.mkdir(exist_ok=True)
    with open(out / "data.csv", "w") as fh:
        fh.write("x,y\n" + "".join(f"{x:.6f},{y:.6f}\n" for x, y in rows))
    ys = [y for _, y in rows]
    stats = {"seed": seed, "points": len(rows), "mean_y": sum(ys) / len(ys), "min_y": min(ys), "max_y": max(ys)}
    (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(f"preprocess: {len(rows)} points written to prepared/data.csv")


def train(seed: int) -> int:
    index = int(os.environ.get("E31_ARRAY_INDEX", "0"))
    size = int(os.environ.get("E31_ARRAY_SIZE", "1"))
    print(f"train: array task {index} of {size}: fold {index} held out")
    if os.environ.get("FAIL_TASK", "").strip() == str(index):
        print(f"train: FAIL_TASK={index}: this task fails on purpose", file=sys.stderr)
        return 3
    rows = points(seed)
    held = [r for k, r in enumerate(rows) if k % size == index]
    rest = [r for k, r in enumerate(rows) if k % size != index]
    slope, intercept = fit(rest)
    result = {"fold": index, "folds": size, "trained_on": len(rest), "held_out": len(held), "slope": slope,
              "intercept": intercept, "held_out_rmse": rmse(held, slope, intercept)}
    Path("result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"train: fold {index}: slope {slope:.4f}, intercept {intercept:.4f}, "
          f"held-out RMSE {result['held_out_rmse']:.4f}")
    return 0


def evaluate(seed: int) -> int:
    rows = points(seed)
    slope, intercept = fit(rows)
    report = {"slope": slope, "intercept": intercept, "rmse": rmse(rows, slope, intercept),
              "slope_error": abs(slope - TRUE_SLOPE), "intercept_error": abs(intercept - TRUE_INTERCEPT)}
    report["passed"] = report["slope_error"] < 0.1 and report["intercept_error"] < 0.1
    Path("report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"evaluate: slope {slope:.4f} (true {TRUE_SLOPE}), intercept {intercept:.4f} (true {TRUE_INTERCEPT}), "
          f"RMSE {report['rmse']:.4f}: {'passed' if report['passed'] else 'FAILED'}")
    return 0 if report["passed"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("preprocess", "train", "evaluate"))
    args = parser.parse_args()
    banner(args.step)
    seed = int(os.environ.get("SEED", "1"))
    if args.step == "preprocess":
        preprocess(seed)
        return 0
    return train(seed) if args.step == "train" else evaluate(seed)


if __name__ == "__main__":
    sys.exit(main())
