"""Produce model.npz, the pretrained model that infer.py ships with.

Not part of the job: run it by hand to regenerate the model (then update the
sha256 of model.npz in job.yaml; `sha256sum model.npz`):

    python make_model.py            # writes ./model.npz

Fits a standardised logistic regression (scikit-learn, lbfgs) on a fixed 70 %
of the Wisconsin Diagnostic Breast Cancer data shipped with scikit-learn and
stores everything infer.py needs as plain numpy arrays (no pickle), together
with the indices of the rows it was trained on, so that infer.py can report
accuracy on the 30 % the model never saw.
"""

import argparse

import numpy as np
import sklearn
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

SPLIT_SEED = 20240601
TRAIN_FRACTION = 0.7


def train_indices(y: np.ndarray) -> np.ndarray:
    """A stratified 70 % of the rows, chosen with a fixed seed."""
    rng = np.random.default_rng(SPLIT_SEED)
    chosen = []
    for label in np.unique(y):
        rows = np.flatnonzero(y == label)
        rng.shuffle(rows)
        chosen.append(rows[: int(round(len(rows) * TRAIN_FRACTION))])
    return np.sort(np.concatenate(chosen))


def build():
    data = load_breast_cancer()
    x, y = data.data, data.target
    idx = train_indices(y)
    scaler = StandardScaler().fit(x[idx])
    clf = LogisticRegression(C=0.5, max_iter=5000).fit(scaler.transform(x[idx]), y[idx])
    return {
        "mean": scaler.mean_,
        "scale": scaler.scale_,
        "coef": clf.coef_.ravel(),
        "intercept": clf.intercept_,
        "classes": np.array(data.target_names, dtype="U16"),
        "feature_names": np.array(data.feature_names, dtype="U32"),
        "train_idx": idx.astype(np.int32),
        "trained_with": np.array(f"scikit-learn {sklearn.__version__}"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="model.npz")
    args = ap.parse_args()
    arrays = build()
    np.savez(args.out, **arrays)
    n_rows = len(arrays["train_idx"])
    print(f"wrote {args.out}: {len(arrays['coef'])} weights, trained on {n_rows} rows")


if __name__ == "__main__":
    main()
