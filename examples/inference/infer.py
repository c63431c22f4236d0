"""Batch inference: apply the shipped model (model.npz) to the 569 real tumour
records of the Wisconsin Diagnostic Breast Cancer data set.

The model is a standardised logistic regression stored as plain numpy arrays
(produced by make_model.py); inference is pure numpy. The input rows come from
sklearn.datasets.load_breast_cancer(), a CSV file inside the scikit-learn
package, so nothing is downloaded. Writes predictions.csv (one row per record)
and summary.json (counts, accuracy on the rows the model never saw, timings).
"""

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer


def announce() -> None:
    print("== E31 job environment ==")
    for key in ("E31_JOB_ID", "E31_NODE_RANK", "E31_NUM_NODES", "CUDA_VISIBLE_DEVICES"):
        print(f"{key}={os.environ.get(key, '<unset>')}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, cwd {os.getcwd()}")


def predict_proba(model, x: np.ndarray) -> np.ndarray:
    z = (x - model["mean"]) / model["scale"]
    logit = z @ model["coef"] + model["intercept"][0]
    return 1.0 / (1.0 + np.exp(-logit))  # P(class 1)


def confusion(y_true: np.ndarray, y_pred: np.ndarray) -> list:
    return [[int(((y_true == t) & (y_pred == p)).sum()) for p in (0, 1)] for t in (0, 1)]


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="model.npz")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threshold", type=float, default=0.5)
    args = ap.parse_args()

    announce()
    t_start = time.perf_counter()
    with np.load(args.model, allow_pickle=False) as f:
        model = {k: f[k] for k in f.files}
    classes = [str(c) for c in model["classes"]]
    print(
        f"model: {args.model}, logistic regression over {len(model['coef'])} features, "
        f"classes {classes}, {model['trained_with']}"
    )
    data = load_breast_cancer()
    x, y = data.data, data.target
    if list(data.feature_names) != [str(n) for n in model["feature_names"]]:
        print("error: input features do not match the model's", file=sys.stderr)
        return 2
    seen = np.zeros(len(y), dtype=bool)
    seen[model["train_idx"]] = True
    print(f"input: {len(y)} records from the Wisconsin Diagnostic Breast Cancer data set")

    t_infer = time.perf_counter()
    probs = np.empty(len(y))
    n_batches = (len(y) + args.batch_size - 1) // args.batch_size
    for i, start in enumerate(range(0, len(y), args.batch_size), 1):
        sl = slice(start, start + args.batch_size)
        probs[sl] = predict_proba(model, x[sl])
        print(f"batch {i:2d}/{n_batches}: rows {start}..{min(start + args.batch_size, len(y)) - 1}")
    infer_seconds = time.perf_counter() - t_infer
    pred = (probs >= args.threshold).astype(int)

    with open("predictions.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row", "predicted", f"p_{classes[1]}", "actual", "correct", "split"])
        for i in range(len(y)):
            w.writerow(
                [
                    i,
                    classes[pred[i]],
                    f"{probs[i]:.6f}",
                    classes[y[i]],
                    int(pred[i] == y[i]),
                    "train" if seen[i] else "held_out",
                ]
            )

    held = ~seen
    summary = {
        "model": args.model,
        "dataset": "Breast Cancer Wisconsin (Diagnostic), sklearn load_breast_cancer",
        "n_records": int(len(y)),
        "batch_size": args.batch_size,
        "threshold": args.threshold,
        "predicted_counts": {c: int((pred == k).sum()) for k, c in enumerate(classes)},
        "held_out": {
            "n": int(held.sum()),
            "accuracy": round(float((pred[held] == y[held]).mean()), 6),
            "confusion_matrix": {
                "labels": classes,
                "rows_actual_cols_predicted": confusion(y[held], pred[held]),
            },
        },
        "train_rows": {
            "n": int(seen.sum()),
            "accuracy": round(float((pred[seen] == y[seen]).mean()), 6),
        },
        "timings": {
            "inference_seconds": round(infer_seconds, 6),
            "records_per_second": round(len(y) / max(infer_seconds, 1e-9), 1),
            "total_seconds": round(time.perf_counter() - t_start, 4),
        },
    }
    Path("summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"done: {len(y)} predictions; held-out accuracy {summary['held_out']['accuracy']:.4f} "
        f"on {summary['held_out']['n']} unseen records; wrote predictions.csv, summary.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
