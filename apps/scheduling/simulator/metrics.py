"""Figures of a replay: waits, bounded slowdown by size, fairness, estimate accuracy.

Bounded slowdown (Feitelson, Rudolph, Schwiegelshohn, Sevcik, Wong, "Theory
and Practice in Parallel Job Scheduling", JSSPP 1997) with tau = 10 s:
``max(1, (wait + run) / max(run, tau))``. Jain's fairness index (Jain, Chiu,
Hawe, DEC-TR-301, 1984): ``(sum x)^2 / (n * sum x^2)``, 1 when all equal.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TAU_S = 10.0
SIZE_CLASSES = ("1", "2-8", "9+")
WORST_ACCOUNT_MIN_JOBS = 10
ESTIMATE_TOLERANCE_S = 60.0
WAITED_S = 600.0  # issue 29 item 2: estimates judged on the jobs that waited 10 minutes or more
WAITED_TOLERANCE = 0.2  # ... within max(60 s, 20 % of the real wait)


@dataclass
class JobOutcome:
    """One replayed job: when it came, started and ran, and its first estimate."""

    job_id: int
    account: str
    submit: float
    gpus: int
    gpus_held: int
    run_s: float
    start: float | None = None  # None: never started
    first_estimate: float | None = None  # start estimate of the first cycle that saw it; None: none given
    estimated: bool = False  # True once a first estimate is recorded (it may be None)
    latest_min: float | None = None  # the earliest "no later than" bound any cycle gave it; None: none
    project: str = ""  # fair-share project key (SWF group with --projects); "": the account's own

    @property
    def wait_s(self) -> float:
        return self.start - self.submit

    @property
    def end(self) -> float:
        return self.start + self.run_s


def bounded_slowdown(wait_s: float, run_s: float, tau_s: float = TAU_S) -> float:
    """``max(1, (wait + run) / max(run, tau))``."""
    return max(1.0, (wait_s + run_s) / max(run_s, tau_s))


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index of ``values``; None for no values, 1.0 if all are zero."""
    xs = list(values)
    if not xs:
        return None
    square_sum = sum(x * x for x in xs)
    if square_sum == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square_sum)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def size_class(gpus: int) -> str:
    """``"1"``, ``"2-8"`` or ``"9+"`` GPUs asked."""
    if gpus <= 1:
        return "1"
    return "2-8" if gpus <= 8 else "9+"


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _r(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def summarise(outcomes: Sequence[JobOutcome], total_gpus: int, *, with_estimates: bool = True) -> dict:
    """The figures of a replay over its started jobs (see the module docstring).

    Args:
        outcomes: every replayed job; the ones never started count in ``unstarted`` only.
        total_gpus: GPUs in the pool, for the utilisation.
        with_estimates: False for recorded schedules, which have no estimates.
    """
    done = [o for o in outcomes if o.start is not None]
    out: dict = {"jobs": len(outcomes), "unstarted": len(outcomes) - len(done)}
    if not done:
        return out
    waits = [o.wait_s for o in done]
    bslds = [bounded_slowdown(o.wait_s, o.run_s) for o in done]
    first_submit = min(o.submit for o in done)
    last_end = max(o.end for o in done)
    span = last_end - first_submit
    work = sum(o.gpus_held * o.run_s for o in done)
    out["utilisation"] = _r(work / (total_gpus * span), 4) if span > 0 else None
    out["span_s"] = round(span, 1)
    out["wait_mean_s"] = _r(_mean(waits), 1)
    out["wait_p50_s"] = _r(percentile(waits, 50), 1)
    out["wait_p95_s"] = _r(percentile(waits, 95), 1)
    out["wait_max_s"] = _r(max(waits), 1)
    out["bsld_mean"] = _r(_mean(bslds), 3)
    out["bsld_p95"] = _r(percentile(bslds, 95), 3)
    by_size = {}
    for cls in SIZE_CLASSES:
        idx = [i for i, o in enumerate(done) if size_class(o.gpus) == cls]
        w = [waits[i] for i in idx]
        by_size[cls] = {"jobs": len(idx), "wait_mean_s": _r(_mean(w), 1), "wait_max_s": _r(max(w), 1) if w else None,
                        "bsld_mean": _r(_mean([bslds[i] for i in idx]), 3)}
    out["by_size"] = by_size
    per_account: dict[str, list[float]] = {}
    for o, b in zip(done, bslds, strict=True):
        per_account.setdefault(o.account, []).append(b)
    means = {a: sum(v) / len(v) for a, v in per_account.items()}
    eligible = [means[a] for a, v in per_account.items() if len(v) >= WORST_ACCOUNT_MIN_JOBS]
    out["accounts"] = len(per_account)
    out["worst_account_bsld"] = _r(max(eligible), 2) if eligible else None
    out["jain_accounts"] = _r(jain_index(means.values()), 4)
    if any(o.project for o in outcomes):
        out.update(project_figures(done, bslds))
    if with_estimates:
        out.update(estimate_figures(done))
    return out


def project_figures(done: Sequence[JobOutcome], bslds: Sequence[float]) -> dict:
    """Per-project figures (issue 25 item 4), a job without a project counted in its account's
    personal project (``~account``, :func:`apps.scheduling.core.tree_project`): ``projects``, the
    worst project's mean bounded slowdown (``worst_project_bsld``, over projects of
    :data:`WORST_ACCOUNT_MIN_JOBS` jobs or more), Jain's index over the projects' mean bsld
    (``jain_projects``), and ``by_project``: ``{key: {jobs, users, gpu_hours, bsld_mean}}``
    (GPU-hours: GPUs held x run time / 3600), largest first."""
    rows: dict[str, dict] = {}
    users: dict[str, set[str]] = {}
    for o, b in zip(done, bslds, strict=True):
        key = o.project or f"~{o.account}"
        row = rows.setdefault(key, {"jobs": 0, "gpu_s": 0.0, "bsld_sum": 0.0})
        row["jobs"] += 1
        row["gpu_s"] += o.gpus_held * o.run_s
        row["bsld_sum"] += b
        users.setdefault(key, set()).add(o.account)
    means = {k: r["bsld_sum"] / r["jobs"] for k, r in rows.items()}
    eligible = [means[k] for k, r in rows.items() if r["jobs"] >= WORST_ACCOUNT_MIN_JOBS]
    by_project = {k: {"jobs": r["jobs"], "users": len(users[k]), "gpu_hours": round(r["gpu_s"] / 3600, 1),
                      "bsld_mean": _r(means[k], 3)}
                  for k, r in sorted(rows.items(), key=lambda kv: (-kv[1]["gpu_s"], kv[0]))}
    return {"projects": len(rows), "worst_project_bsld": _r(max(eligible), 2) if eligible else None,
            "jain_projects": _r(jain_index(means.values()), 4), "by_project": by_project}


def estimate_figures(done: Sequence[JobOutcome]) -> dict:
    """Share of first estimates within 60 s of the real start (all jobs, and jobs that waited
    60 s or more), and the median absolute error over jobs that got an estimate (all, and waited)."""
    def hit(o: JobOutcome) -> bool:
        return o.first_estimate is not None and abs(o.first_estimate - o.start) <= ESTIMATE_TOLERANCE_S

    waited = [o for o in done if o.wait_s >= ESTIMATE_TOLERANCE_S]
    errors = [abs(o.first_estimate - o.start) for o in done if o.first_estimate is not None]
    errors_waited = [abs(o.first_estimate - o.start) for o in waited if o.first_estimate is not None]
    return {
        "estimate_within_60s": _r(sum(map(hit, done)) / len(done), 4),
        "estimate_within_60s_waited": _r(sum(map(hit, waited)) / len(waited), 4) if waited else None,
        "estimate_abs_error_median_s": _r(percentile(errors, 50), 1),
        "estimate_abs_error_median_waited_s": _r(percentile(errors_waited, 50), 1),
        "estimate_missing": sum(1 for o in done if o.first_estimate is None),
        # "no later than" (issue 14 item 3): jobs that started after a bound some cycle gave them
        "bound_passed": sum(1 for o in done if o.latest_min is not None and o.start > o.latest_min + 1e-6),
        "bound_passed_max_s": _r(max((o.start - o.latest_min for o in done if o.latest_min is not None),
                                     default=0.0), 1),
        **waited_estimate_figures(done),
    }


def waited_estimate_figures(done: Sequence[JobOutcome]) -> dict:
    """Estimates judged where users wait (issue 29 item 2), over the jobs that waited
    :data:`WAITED_S` (10 min) or more: ``estimate_waited_within``, the share whose first likely
    start is within max(60 s, 20 % of the real wait) of the real start (a job given no estimate
    is a miss); ``estimate_waited_median_error_s``, the median absolute error of those given
    one; ``estimate_waited_before``, the share of those whose real start came before the likely
    one (a likely start is a median: about half should). Shares 0..1; None without such jobs."""
    waited = [o for o in done if o.wait_s >= WAITED_S]
    given = [o for o in waited if o.first_estimate is not None]

    def close(o: JobOutcome) -> bool:
        return abs(o.first_estimate - o.start) <= max(ESTIMATE_TOLERANCE_S, WAITED_TOLERANCE * o.wait_s)

    return {
        "estimate_waited_jobs": len(waited),
        "estimate_waited_within": _r(sum(map(close, given)) / len(waited), 4) if waited else None,
        "estimate_waited_median_error_s": _r(percentile([abs(o.first_estimate - o.start) for o in given], 50), 1),
        "estimate_waited_before": _r(sum(o.start < o.first_estimate for o in given) / len(given), 4)
        if given else None,
    }
