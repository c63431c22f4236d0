"""A set of simulations: an SIR epidemic model swept over a grid of parameters
and scored against a real outbreak.

The data (boarding_school_flu_1978.csv, shipped beside this script) are the
daily counts of pupils confined to bed during the influenza outbreak at an
English boarding school in January 1978 (763 boys; BMJ 1978;1(6112):587).
Every (beta, gamma) pair of the grid is one SIR simulation

    dS/dt = -beta S I / N,   dI/dt = beta S I / N - gamma I,   dR/dt = gamma I

started from one infected pupil on day 0 and integrated with fixed-step RK4
(all simulations advance together as numpy vectors). Each run is scored by the
RMSE between I(t) and the pupils in bed on days 1..14, and its simulated final
size is checked against the analytic final-size relation
ln(S0/S_inf) = R0 (1 - S_inf/N).

Writes results.csv (one row per simulation) and sweep.png (matplotlib, Agg).

As a task of a job array (job.yaml has ``array: 8``), it runs only its share of
the beta values: every E31_ARRAY_SIZE-th one, starting at E31_ARRAY_INDEX
(task 0 takes betas 0, 8, 16, 24; task 1 takes 1, 9, 17, 25; ...), so the
tasks together cover the whole grid, each on a GPU of its own. Run by hand
(no E31_ARRAY_* variables), it runs the whole grid.
"""

import argparse
import csv
import json
import os
import platform
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

N = 763
DATA = "boarding_school_flu_1978.csv"


def announce() -> None:
    print("== E31 job environment ==")
    for key in ("E31_JOB_ID", "E31_NODE_RANK", "E31_NUM_NODES", "E31_ARRAY_INDEX", "E31_ARRAY_SIZE",
                "CUDA_VISIBLE_DEVICES"):
        print(f"{key}={os.environ.get(key, '<unset>')}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, cwd {os.getcwd()}")


def array_share() -> tuple[int, int]:
    """(E31_ARRAY_INDEX, E31_ARRAY_SIZE) of a task of a job array; (0, 1) outside one."""
    size = int(os.environ.get("E31_ARRAY_SIZE") or 1)
    index = int(os.environ.get("E31_ARRAY_INDEX") or 0)
    if not 0 <= index < size:
        raise SystemExit(f"E31_ARRAY_INDEX={index} is outside 0..{size - 1}")
    return index, size


def load_observed(path: str):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return np.array([int(r["day"]) for r in rows]), np.array([float(r["in_bed"]) for r in rows])


def simulate(beta: np.ndarray, gamma: np.ndarray, days: int, dt: float, i0: float):
    """RK4 for every (beta, gamma) at once; returns S, I, R sampled once a day."""
    s = np.full(beta.shape, N - i0)
    i = np.full(beta.shape, i0)
    r = np.zeros(beta.shape)
    steps_per_day = int(round(1.0 / dt))
    out = np.empty((3, days + 1) + beta.shape)
    out[:, 0] = s, i, r

    def f(s, i):
        infect = beta * s * i / N
        recover = gamma * i
        return -infect, infect - recover, recover

    for day in range(1, days + 1):
        for _ in range(steps_per_day):
            k1 = f(s, i)
            k2 = f(s + 0.5 * dt * k1[0], i + 0.5 * dt * k1[1])
            k3 = f(s + 0.5 * dt * k2[0], i + 0.5 * dt * k2[1])
            k4 = f(s + dt * k3[0], i + dt * k3[1])
            s = s + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            i = i + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            r = r + dt / 6 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
        out[:, day] = s, i, r
    return out


def analytic_final_size(r0: np.ndarray, s0: float) -> np.ndarray:
    """S_inf/N solving ln(s0/x) = r0 (1 - x) on (0, s0), by bisection."""
    lo = np.full(r0.shape, 1e-12)
    hi = np.full(r0.shape, s0 * (1 - 1e-12))
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        g = np.log(s0 / mid) - r0 * (1 - mid)
        # g > 0 for x below the root, g < 0 between the root and s0 (when r0 > 1)
        lo = np.where(g > 0, mid, lo)
        hi = np.where(g > 0, hi, mid)
    return 0.5 * (lo + hi)


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--beta", default="1.0:2.5:31", help="start:stop:count, per day")
    ap.add_argument("--gamma", default="0.2:1.0:33", help="start:stop:count, per day")
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--dt", type=float, default=0.02)
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args()

    announce()
    t_start = time.perf_counter()
    obs_day, obs_bed = load_observed(args.data)
    print(f"data: {args.data}, {len(obs_day)} days, peak {int(obs_bed.max())} of {N} pupils in bed")

    def grid(spec: str) -> np.ndarray:
        a, b, n = spec.split(":")
        return np.linspace(float(a), float(b), int(n))

    betas, gammas = grid(args.beta), grid(args.gamma)
    index, size = array_share()
    if size > 1:
        betas = betas[index::size]  # this task's share of the sweep
        print(f"array task {index} of {size}: {len(betas)} of the beta values")
    bb, gg = np.meshgrid(betas, gammas, indexing="ij")
    print(
        f"sweep: {bb.size} simulations, beta {betas[0]}..{betas[-1]} x {len(betas)}, "
        f"gamma {gammas[0]}..{gammas[-1]} x {len(gammas)}, RK4 dt={args.dt} d over {args.days} d"
    )
    t_sim = time.perf_counter()
    traj = simulate(bb, gg, args.days, args.dt, i0=1.0)
    sim_seconds = time.perf_counter() - t_sim
    s_t, i_t, r_t = traj
    print(f"simulated {bb.size} runs x {args.days} days in {sim_seconds:.2f} s")

    rmse = np.sqrt(((i_t[obs_day] - obs_bed[:, None, None]) ** 2).mean(axis=0))
    r0 = bb / gg
    peak_i = i_t.max(axis=0)
    peak_day = i_t.argmax(axis=0)
    attack = 1 - s_t[-1] / N
    attack_analytic = 1 - analytic_final_size(r0, (N - 1.0) / N)
    conserved = np.abs(s_t + i_t + r_t - N).max()

    best = np.unravel_index(int(np.argmin(rmse)), rmse.shape)
    b_best, g_best = float(bb[best]), float(gg[best])
    for k in range(len(betas)):
        j = int(np.argmin(rmse[k]))
        print(
            f"beta {betas[k]:.3f}: best gamma {gammas[j]:.3f} rmse {rmse[k, j]:7.2f}  "
            f"R0 {r0[k, j]:5.2f}  peak {peak_i[k, j]:6.1f} on day {peak_day[k, j]}"
        )

    with open("results.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "beta",
                "gamma",
                "R0",
                "rmse_vs_observed",
                "peak_infected",
                "peak_day",
                "attack_rate_simulated",
                "attack_rate_analytic",
                "infected_at_end",
            ]
        )
        for k in range(len(betas)):
            for j in range(len(gammas)):
                w.writerow(
                    [
                        f"{bb[k, j]:.4f}",
                        f"{gg[k, j]:.4f}",
                        f"{r0[k, j]:.4f}",
                        f"{rmse[k, j]:.3f}",
                        f"{peak_i[k, j]:.3f}",
                        int(peak_day[k, j]),
                        f"{attack[k, j]:.5f}",
                        f"{attack_analytic[k, j]:.5f}",
                        f"{i_t[-1, k, j]:.4f}",
                    ]
                )

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    extent = [gammas[0], gammas[-1], betas[0], betas[-1]]
    im = axes[0].imshow(
        np.log10(rmse), origin="lower", aspect="auto", extent=extent, cmap="viridis_r"
    )
    fig.colorbar(im, ax=axes[0], label="log10 RMSE (pupils)")
    cs = axes[0].contour(gg, bb, r0, levels=[2, 3, 4, 6, 8], colors="w", linewidths=0.7)
    axes[0].clabel(cs, fmt="R0=%g", fontsize=7)
    axes[0].plot(g_best, b_best, "r*", ms=14, label=f"best: beta={b_best:.2f}, gamma={g_best:.3f}")
    axes[0].set(
        xlabel="gamma (recovery rate, 1/day)",
        ylabel="beta (contact rate, 1/day)",
        title="Fit to observed cases",
    )
    axes[0].legend(loc="lower right", fontsize=8)

    im = axes[1].imshow(
        attack, origin="lower", aspect="auto", extent=extent, cmap="magma", vmin=0, vmax=1
    )
    fig.colorbar(im, ax=axes[1], label="fraction ever infected")
    axes[1].set(xlabel="gamma (1/day)", ylabel="beta (1/day)", title="Simulated attack rate")

    days = np.arange(args.days + 1)
    for dk in (-4, 4):
        k = min(max(best[0] + dk, 0), len(betas) - 1)
        axes[2].plot(
            days,
            i_t[:, k, best[1]],
            lw=1,
            alpha=0.6,
            label=f"beta={betas[k]:.2f}, gamma={g_best:.3f}",
        )
    axes[2].plot(
        days, i_t[:, best[0], best[1]], "k", lw=2, label=f"best fit (R0={b_best / g_best:.2f})"
    )
    axes[2].plot(obs_day, obs_bed, "ro", label="observed: pupils in bed")
    axes[2].set(
        xlim=(0, 20),
        xlabel="day",
        ylabel="infected pupils",
        title="Boarding school influenza, 1978",
    )
    axes[2].legend(fontsize=8)
    fig.suptitle(f"SIR parameter sweep: {bb.size} simulations")
    fig.savefig("sweep.png", dpi=100)
    plt.close(fig)

    total = time.perf_counter() - t_start
    best_summary = {
        "beta": round(b_best, 4),
        "gamma": round(g_best, 4),
        "R0": round(b_best / g_best, 3),
        "rmse": round(float(rmse[best]), 3),
        "peak_infected": round(float(peak_i[best]), 1),
        "peak_day": int(peak_day[best]),
    }
    print("best fit: " + json.dumps(best_summary))
    print(
        f"checks: max |S+I+R-N| {conserved:.2e}; max |attack simulated - analytic| "
        f"{np.abs(attack - attack_analytic)[i_t[-1] < 1e-3].max():.2e} (runs that have ended)"
    )
    print(f"done: {bb.size} simulations in {total:.2f} s; wrote results.csv and sweep.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
