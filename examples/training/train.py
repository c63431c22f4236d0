"""Train a small numpy MLP on the UCI handwritten digits (shipped with scikit-learn).

Writes checkpoints/epoch_NNN.npz every --save-every epochs, checkpoints/model.npz
(the final weights) and metrics.json (loss and accuracy per epoch, timings).
Pure numpy: the data comes from sklearn.datasets.load_digits(), which reads a
file inside the scikit-learn package, so nothing is downloaded.
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits


def announce() -> None:
    print("== E31 job environment ==")
    for key in ("E31_JOB_ID", "E31_NODE_RANK", "E31_NUM_NODES", "CUDA_VISIBLE_DEVICES"):
        print(f"{key}={os.environ.get(key, '<unset>')}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, cwd {os.getcwd()}")


def split(n: int, test_fraction: float, rng: np.random.Generator):
    order = rng.permutation(n)
    n_test = int(round(n * test_fraction))
    return order[n_test:], order[:n_test]


def init_params(n_in: int, n_hidden: int, n_out: int, rng: np.random.Generator) -> dict:
    return {
        "W1": rng.normal(0.0, np.sqrt(2.0 / n_in), (n_in, n_hidden)),
        "b1": np.zeros(n_hidden),
        "W2": rng.normal(0.0, np.sqrt(1.0 / n_hidden), (n_hidden, n_out)),
        "b2": np.zeros(n_out),
    }


def forward(p: dict, x: np.ndarray):
    h_pre = x @ p["W1"] + p["b1"]
    h = np.maximum(h_pre, 0.0)
    logits = h @ p["W2"] + p["b2"]
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return h_pre, h, probs


def evaluate(p: dict, x: np.ndarray, y: np.ndarray):
    _, _, probs = forward(p, x)
    loss = float(-np.log(probs[np.arange(len(y)), y] + 1e-12).mean())
    acc = float((probs.argmax(axis=1) == y).mean())
    return loss, acc


def save(path: Path, p: dict, **extra) -> None:
    np.savez(path, **{k: v.astype(np.float32) for k, v in p.items()}, **extra)


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--out", default="checkpoints")
    args = ap.parse_args()
    seed = int(os.environ.get("SEED", "0"))

    announce()
    t_start = time.perf_counter()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)  # pixel counts are 0..16
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train_idx, test_idx = split(len(y), 0.2, rng)
    x_tr, y_tr, x_te, y_te = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    n_classes = int(y.max()) + 1
    print(
        f"dataset: UCI optical digits, {len(y)} images of 8x8 px, {n_classes} classes; "
        f"train {len(y_tr)}, test {len(y_te)}; seed {seed}"
    )

    p = init_params(x.shape[1], args.hidden, n_classes, rng)
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    history = []
    t_load = time.perf_counter() - t_start

    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        order = rng.permutation(len(y_tr))
        for start in range(0, len(order), args.batch_size):
            b = order[start : start + args.batch_size]
            xb, yb = x_tr[b], y_tr[b]
            h_pre, h, probs = forward(p, xb)
            d_logits = probs.copy()
            d_logits[np.arange(len(yb)), yb] -= 1.0
            d_logits /= len(yb)
            grads = {
                "W2": h.T @ d_logits + args.weight_decay * p["W2"],
                "b2": d_logits.sum(axis=0),
            }
            d_h = (d_logits @ p["W2"].T) * (h_pre > 0)
            grads["W1"] = xb.T @ d_h + args.weight_decay * p["W1"]
            grads["b1"] = d_h.sum(axis=0)
            for k in p:
                vel[k] = args.momentum * vel[k] - args.lr * grads[k]
                p[k] += vel[k]
        train_loss, train_acc = evaluate(p, x_tr, y_tr)
        test_loss, test_acc = evaluate(p, x_te, y_te)
        seconds = time.perf_counter() - t0
        history.append(
            {
                "epoch": epoch,
                "train_loss": round(train_loss, 6),
                "train_accuracy": round(train_acc, 6),
                "test_loss": round(test_loss, 6),
                "test_accuracy": round(test_acc, 6),
                "seconds": round(seconds, 4),
            }
        )
        print(
            f"epoch {epoch:3d}/{args.epochs}  train_loss {train_loss:.4f}  "
            f"train_acc {train_acc:.4f}  test_loss {test_loss:.4f}  "
            f"test_acc {test_acc:.4f}  ({seconds * 1000:.0f} ms)"
        )
        if args.save_every and epoch % args.save_every == 0:
            save(out / f"epoch_{epoch:03d}.npz", p, epoch=np.int64(epoch))

    save(
        out / "model.npz",
        p,
        epoch=np.int64(args.epochs),
        input_scale=np.float64(16.0),
        classes=np.arange(n_classes),
    )
    total = time.perf_counter() - t_start
    metrics = {
        "dataset": "UCI optical recognition of handwritten digits (sklearn load_digits)",
        "model": f"MLP 64-{args.hidden}-{n_classes}, ReLU, softmax; numpy",
        "hyperparameters": {**vars(args), "seed": seed},
        "n_train": int(len(y_tr)),
        "n_test": int(len(y_te)),
        "final": {
            "train_accuracy": history[-1]["train_accuracy"],
            "test_accuracy": history[-1]["test_accuracy"],
            "test_loss": history[-1]["test_loss"],
        },
        "loss_per_epoch": [h["train_loss"] for h in history],
        "epochs": history,
        "timings": {
            "load_seconds": round(t_load, 4),
            "train_seconds": round(sum(h["seconds"] for h in history), 4),
            "total_seconds": round(total, 4),
        },
    }
    Path("metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(
        f"done: test accuracy {history[-1]['test_accuracy']:.4f} after {args.epochs} epochs, "
        f"{total:.2f} s; wrote {out / 'model.npz'} and metrics.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
