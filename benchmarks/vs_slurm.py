"""E31 and a real Slurm 22.05 measured side by side in one run, phases interleaved (issue 10).

Each round runs one phase per Slurm profile and one per E31 shape, alternating
(Slurm default, E31 production, Slurm lowlat, E31 ``make run``, ...), every phase on
a fresh system: Slurm restarted clean by its ``setup.sh PROFILE``, E31 started fresh
(a new database or var dir). After N rounds (default 3) each figure is printed as
min / median over the rounds, with the E31 / Slurm ratio (Slurm: its best profile
by median) and the goal, met or not met.

Figures (all through public behaviour only: the HTTP API, ``sbatch``/``srun``/``squeue``,
management commands):

- **submissions per second, 4 parallel clients.** E31: ``benchmarks/submit_rate.py``'s
  clients for ``--seconds``, while a long 8-GPU blocker job holds the node, so every
  submission is accepted and queued. Slurm: 4 parallel ``sbatch --wrap true -G 1 -t 1``
  loops (``measure.sh`` a2; the node runs the jobs meanwhile). Goal: production >= 2x
  Slurm's best, ``make run`` >= 1x.
- **submit cost against queue length** (E31 only; goal <= 1.2x): the median of up to
  ``--flat`` serial submits (fewer once ``--flat-budget`` seconds are spent) with ~0
  jobs queued (behind the blocker), then again with ``--queued`` jobs queued. The queue
  is filled with one job array request where the API accepts ``array`` (issue 10, item
  5); otherwise by cloning one job submitted through the API with ``bulk_create`` in
  ``manage.py shell`` (rows and their ``submitted`` event copied as they are, so no
  column is invented). Before each series one submit waits until its queue position is
  written (the cycle has caught up).
- **trivial 1-GPU jobs per second through one 8-GPU node.** ``--jobs`` jobs submitted
  serially, from the first submit until all are done. E31: ``throughput.drain_rate``
  (server stamps, one simulated ``8xH100-80GB`` agent). Slurm: ``measure.sh`` b1
  (until ``squeue`` is empty). Goal >= 2x Slurm's best.
- **submit to running on an idle pool**, median and p95 of ``--lat`` jobs, one at a
  time. E31: ``start_latency.idle_latency`` (``run_started_at - submitted_at``).
  Slurm: ``measure.sh`` c (the job script writes ``date +%s.%N``, minus the wall time
  just before ``sbatch``; 1-2 s idle before each). Goals: median <= 50 ms, p95 <= 100 ms.
  Slurm's interactive ``srun -G 1 -t 1 date +%s.%N`` start is printed for reference.

The two E31 shapes: **production** = ``devstack/`` (``--web`` uvicorn
processes, a Celery worker, PostgreSQL ``BENCH_DATABASE_URL``, Redis
``BENCH_REDIS_URL``; both wiped) and **make run** = ``manage.py standalone`` on SQLite
in a temporary var dir, with its two built-in agents' nodes drained and one
``8xH100-80GB`` agent added (``benchmarks/_standalone.py``).

Slurm comes from ``shared/peers/slurm`` (``../shared/peers/slurm`` from the repository
root, or ``--slurm-dir``/``E31_SLURM_PEER``); it needs root, and its ``setup.sh``
installs ``slurm-wlm`` and ``munge`` with apt (run ``apt-get update`` once first on a
fresh machine). Run ``setup.sh default`` once by hand to install; this script then
restarts it clean before each of its phases and stops it (``stop.sh``) after each, so
nothing of Slurm runs during E31's phases.

    .venv/bin/python benchmarks/vs_slurm.py --quick          # ~3-5 min: 1 round, small sizes
    .venv/bin/python benchmarks/vs_slurm.py                  # 3 rounds, <= 20 min
    .venv/bin/python benchmarks/vs_slurm.py --profiles default lowlat tuned --rounds 5 --json out.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import submit_rate
from _stack import ROOT, env, live_stack, manage, percentile, trivial_spec
from rich.console import Console
from rich.table import Table
from start_latency import idle_latency
from throughput import drain_rate

console = Console(stderr=True)
CLIENTS = submit_rate.CLIENTS
SLURM_RUN = Path("/tmp/slurm-peer")
BENCH_NODE = ("bench-node", "8xH100-80GB")


# ---------------------------------------------------------------- Slurm ------

def default_slurm_dir() -> Path:
    return Path(os.environ.get("E31_SLURM_PEER", ROOT.parent / "shared" / "peers" / "slurm"))


class Slurm:
    """The one-host Slurm of ``shared/peers/slurm``, driven with its own scripts and the Slurm CLI.

    Args:
        peer_dir: the folder holding ``setup.sh``, ``stop.sh``.
    """

    def __init__(self, peer_dir: Path):
        self.peer_dir = peer_dir
        self.out = SLURM_RUN / "out" / "vs-e31"

    def check(self) -> None:
        """Raise SystemExit with what to do when Slurm cannot be started here."""
        setup = self.peer_dir / "setup.sh"
        if not setup.exists():
            raise SystemExit(f"vs_slurm: no {setup}; pass --slurm-dir (the shared/peers/slurm folder) "
                             "or set E31_SLURM_PEER")
        if os.geteuid() != 0:
            raise SystemExit("vs_slurm: Slurm's setup.sh runs as root; run this script as root")
        if not shutil.which("sbatch"):
            raise SystemExit(f"vs_slurm: Slurm is not installed; run `apt-get update` once, then `{setup} default` "
                             "(installs slurm-wlm and munge, starts one node with 8 fake GPUs)")

    def setup(self, profile: str) -> None:
        """Restart Slurm clean with ``profile`` (``setup.sh PROFILE``: no job state kept).

        Raises:
            RuntimeError: setup.sh failed (its output is included).
        """
        r = subprocess.run([str(self.peer_dir / "setup.sh"), profile], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"setup.sh {profile} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        self._fresh_out()

    def stop(self) -> None:
        subprocess.run([str(self.peer_dir / "stop.sh"), "--quiet"], check=False)
        shutil.rmtree(self.out, ignore_errors=True)

    def _fresh_out(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)

    @staticmethod
    def queue_len() -> int:
        r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
        return len(r.stdout.split())

    def wait_empty(self, timeout: float) -> float | None:
        """Wait until no job is left in the queue; the time.time() it was seen empty, or None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.queue_len() == 0:
                return time.time()
            time.sleep(0.1)
        return None

    def cancel_all(self) -> None:
        subprocess.run(["scancel", "--user=root", "--quiet"], check=False)
        self.wait_empty(300)

    def submit_rate(self, seconds: float) -> float:
        """``measure.sh`` a2 for ``seconds``: 4 parallel ``sbatch`` loops; successful submissions per second."""
        # measure.sh's loop, bounded by time instead of a count; bash 5's $EPOCHREALTIME (no fork per check)
        loop = ('end=$(( ${EPOCHREALTIME/./} + $1 )); n=0; while (( ${EPOCHREALTIME/./} < end )); do '
                'sbatch -Q --wrap true -G 1 -t 1 >/dev/null 2>&1 && n=$((n+1)); done; echo "$n"')
        start = time.perf_counter()
        procs = [subprocess.Popen(["bash", "-c", loop, "loop", str(round(seconds * 1e6))], cwd=self.out,
                                  stdout=subprocess.PIPE, text=True) for _ in range(CLIENTS)]
        counts = [int(p.communicate()[0].strip() or 0) for p in procs]
        elapsed = time.perf_counter() - start
        self.cancel_all()
        return sum(counts) / elapsed

    def throughput(self, jobs: int, timeout: float) -> dict:
        """``measure.sh`` b1: ``jobs`` trivial 1-GPU jobs submitted serially, until the queue is empty."""
        comp = SLURM_RUN / "jobcomp.txt"
        lines0 = len(comp.read_text().splitlines())
        t0 = time.time()
        for _ in range(jobs):
            subprocess.run(["sbatch", "-Q", "--wrap", "true", "-G", "1", "-t", "1"], cwd=self.out,
                           stdout=subprocess.DEVNULL, check=True)
        t1 = self.wait_empty(timeout)
        done = sum("JobState=COMPLETED" in line for line in comp.read_text().splitlines()[lines0:])
        if t1 is None:
            t1 = time.time()
            self.cancel_all()
        return {"completed": done, "jobs_per_s": done / (t1 - t0)}

    def latency(self, samples: int, gap: float) -> list[float]:
        """``measure.sh`` c: submit -> job script start (s), one job at a time.

        ``gap`` + rand(0..1) s idle before each; a job not started within 120 s is skipped.
        """
        out = []
        stamp = self.out / "stamp"
        for _ in range(samples):
            time.sleep(gap + random.random())
            stamp.unlink(missing_ok=True)
            t0 = time.time()
            jid = subprocess.run(["sbatch", "--parsable", "-G", "1", "-t", "1", "-o", "/dev/null", "--wrap",
                                  f"date +%s.%N > {stamp}.tmp; mv {stamp}.tmp {stamp}"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            deadline = time.monotonic() + 120
            while not (stamp.exists() and stamp.stat().st_size) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not stamp.exists():
                subprocess.run(["scancel", jid], check=False)
                console.print(f"[yellow]slurm job {jid} did not start within 120 s; sample skipped")
            else:
                out.append(float(stamp.read_text()) - t0)
            self.wait_empty(60)
        return out

    def srun_latency(self, samples: int, gap: float) -> list[float]:
        """Interactive ``srun -G 1 -t 1 date +%s.%N``: call -> task start (s), ``gap``+rand(0..1) s idle before each."""
        out = []
        for _ in range(samples):
            time.sleep(gap + random.random())
            t0 = time.time()
            r = subprocess.run(["srun", "-G", "1", "-t", "1", "date", "+%s.%N"], capture_output=True, text=True,
                               check=True, cwd=self.out)
            out.append(float(r.stdout.strip()) - t0)
        return out


def slurm_phase(slurm: Slurm, profile: str, a: argparse.Namespace) -> dict:
    """One Slurm phase: restart with ``profile``, then every figure."""
    slurm.setup(profile)
    res: dict = {}
    step(f"slurm {profile}: submissions/s, {CLIENTS} submitters, {a.seconds:g} s")
    res["submit_rate"] = slurm.submit_rate(a.seconds)
    step(f"slurm {profile}: {a.jobs} trivial jobs through 8 GPUs")
    tp = slurm.throughput(a.jobs, a.drain_limit)
    res["throughput"], res["throughput_done"] = tp["jobs_per_s"], tp["completed"]
    step(f"slurm {profile}: submit -> start, {a.lat} jobs one at a time")
    lat = slurm.latency(a.lat, a.gap)
    res["latency_median"], res["latency_p95"] = statistics.median(lat), percentile(lat, 95)
    step(f"slurm {profile}: srun, {a.srun} calls")
    srun = slurm.srun_latency(a.srun, a.gap)
    res["srun_median"], res["srun_p95"] = statistics.median(srun), percentile(srun, 95)
    return res


# ---------------------------------------------------------------- E31 --------

@dataclass
class Target:
    """A running E31 shape as the phases see it: base URLs, a user token, ``manage.py`` against its database."""

    urls: list[str]
    token: str
    manage: Callable[..., str]

    def client(self, timeout: float = 300) -> httpx.Client:
        return httpx.Client(base_url=self.urls[0], headers={"Authorization": f"Token {self.token}"},
                            timeout=timeout)


@contextmanager
def e31_target(shape: str, web: int) -> Iterator[Target]:
    """A fresh E31 of ``shape`` (``production`` or ``make-run``) with one ``8xH100-80GB`` agent."""
    if shape == "production":
        with live_stack([BENCH_NODE], web=web) as (stack, token):
            yield Target(stack.urls, token, manage)
    else:
        from _standalone import standalone_stack

        with standalone_stack([BENCH_NODE]) as (server, token):
            yield Target(server.urls, token, server.manage)


def queued_count(client: httpx.Client) -> int:
    return client.get("/api/v1/jobs/?state=queued").json()["count"]


def submit_blocker(client: httpx.Client) -> int:
    """A job holding all 8 GPUs for an hour, so every later submission waits; returns its id once it runs.

    Raises:
        TimeoutError: it did not start within 120 s.
    """
    spec = trivial_spec("blocker", gpus=8, command="sleep 3600", limit="2h")
    job_id = client.post("/api/v1/jobs/", json=spec).json()["id"]
    deadline = time.monotonic() + 120
    while client.get(f"/api/v1/jobs/{job_id}/").json()["state"] != "running":
        if time.monotonic() > deadline:
            raise TimeoutError("the blocker job did not start")
        time.sleep(0.1)
    return job_id


def serial_submits(client: httpx.Client, n: int, prefix: str, budget: float) -> list[float]:
    """Wall seconds of up to ``n`` serial ``POST /api/v1/jobs/``, after one warm-up submit whose queue position is set.

    Sampling stops early once ``budget`` seconds have gone by (at least one sample is taken).

    Raises:
        RuntimeError: a submit was not accepted (201).
    """
    warm = client.post("/api/v1/jobs/", json=trivial_spec(f"{prefix}-warm")).json()["id"]
    deadline = time.monotonic() + 600
    while client.get(f"/api/v1/jobs/{warm}/").json()["queue_position"] is None and time.monotonic() < deadline:
        time.sleep(0.2)
    times: list[float] = []
    stop = time.monotonic() + budget
    for i in range(n):
        if times and time.monotonic() > stop:
            break
        t = time.perf_counter()
        r = client.post("/api/v1/jobs/", json=trivial_spec(f"{prefix}-{i}"))
        times.append(time.perf_counter() - t)
        if r.status_code != 201:
            raise RuntimeError(f"submit answered {r.status_code}: {r.text[:300]}")
    return times


FILL_SCRIPT = """
import copy
from apps.jobs.models import Job, JobEvent
template = Job.objects.get(pk={job_id})
events = list(JobEvent.objects.filter(job=template))
left = {count}
while left:
    rows = []
    for _ in range(min(1000, left)):
        row = copy.copy(template)
        row.pk = row.id = None
        row._state = type(template._state)()
        rows.append(row)
    Job.objects.bulk_create(rows)
    clones = []
    for row in rows:
        for event in events:
            clone = copy.copy(event)
            clone.pk = clone.id = None
            clone._state = type(event._state)()
            clone.job = row
            clones.append(clone)
    JobEvent.objects.bulk_create(clones)
    left -= len(rows)
"""


def fill_queue(target: Target, client: httpx.Client, total: int) -> str:
    """Bring the owner's queued jobs to ``total``; returns how (``array`` or ``bulk_create``).

    Uses one job array request (``"array": N``) where the API accepts it; otherwise clones
    one job submitted through the API with ``bulk_create`` (:data:`FILL_SCRIPT`).
    """
    need = total - queued_count(client)
    if need <= 0:
        return "already"
    r = client.post("/api/v1/jobs/", json={**trivial_spec("fill"), "array": need})
    if r.status_code == 201 and queued_count(client) >= total:
        return "array"
    template = r.json()["id"] if r.status_code == 201 else \
        client.post("/api/v1/jobs/", json=trivial_spec("fill")).json()["id"]
    need = total - queued_count(client)
    if need > 0:
        target.manage("shell", "-c", FILL_SCRIPT.format(job_id=int(template), count=int(need)))
    return "bulk_create"


def e31_phase(shape: str, a: argparse.Namespace) -> dict:
    """One E31 phase on a fresh system of ``shape``: every figure, submit rate and queue length last."""
    res: dict = {}
    step(f"e31 {shape}: starting")
    with e31_target(shape, a.web) as target, target.client() as client:
        step(f"e31 {shape}: submit -> running, {a.lat} jobs one at a time")
        lat = idle_latency(client, a.lat)
        res["latency_median"], res["latency_p95"] = statistics.median(lat), percentile(lat, 95)
        step(f"e31 {shape}: {a.jobs} trivial jobs through 8 GPUs")
        tp = drain_rate(client, a.jobs, timeout=a.drain_limit)
        res["throughput"], res["throughput_done"] = tp["jobs_per_s"], tp["released"]
        submit_blocker(client)
        step(f"e31 {shape}: {a.flat} serial submits at ~0 queued")
        flat0 = serial_submits(client, a.flat, "flat0", a.flat_budget)
        res["submit_at_0"], res["submit_at_0_n"] = statistics.median(flat0), len(flat0)
        step(f"e31 {shape}: submissions/s, {CLIENTS} clients, {a.seconds:g} s")
        res["submit_rate"], res["submit_errors"] = submit_rate.run(target.urls, target.token, a.seconds, "submit")
        if a.queued:
            step(f"e31 {shape}: filling the queue to {a.queued:,}")
            res["fill"] = fill_queue(target, client, a.queued)
            res["queued"] = queued_count(client)
            step(f"e31 {shape}: {a.flat} serial submits at {res['queued']:,} queued")
            flat_n = serial_submits(client, a.flat, "flatN", a.flat_budget)
            res["submit_at_n"], res["submit_at_n_n"] = statistics.median(flat_n), len(flat_n)
            res["submit_flat_ratio"] = res["submit_at_n"] / res["submit_at_0"]
    return res


# ---------------------------------------------------------------- report -----

T0 = time.monotonic()


def step(text: str) -> None:
    console.print(f"[dim]{time.monotonic() - T0:7.1f} s[/dim]  {text}")


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (+ uncommitted changes)" if dirty else "")


# (key, label, unit, higher is better)
FIGURES = [
    ("submit_rate", f"submissions per second, {CLIENTS} clients", "/s", True),
    ("throughput", "trivial 1-GPU jobs per second through 8 GPUs", "/s", True),
    ("latency_median", "submit to running, idle pool: median", "s", False),
    ("latency_p95", "submit to running, idle pool: p95", "s", False),
    ("submit_at_0", "submit at ~0 queued (median of serial submits)", "s", False),
    ("submit_at_n", "submit at {queued:,} queued (median)", "s", False),
    ("submit_flat_ratio", "submit cost at {queued:,} queued / at ~0", "x", False),
    ("srun_median", "Slurm interactive srun start: median", "s", False),
]

# (key, shape, kind, value): kind "vs_slurm" = E31 median / Slurm best median >= value;
# "max" = E31 median <= value
GOALS = [
    ("submit_rate", "production", "vs_slurm", 2.0),
    ("submit_rate", "make-run", "vs_slurm", 1.0),
    ("throughput", "production", "vs_slurm", 2.0),
    ("throughput", "make-run", "vs_slurm", 2.0),
    ("latency_median", "production", "max", 0.050),
    ("latency_median", "make-run", "max", 0.050),
    ("latency_p95", "production", "max", 0.100),
    ("latency_p95", "make-run", "max", 0.100),
    ("submit_flat_ratio", "production", "max", 1.2),
    ("submit_flat_ratio", "make-run", "max", 1.2),
]


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s" if v < 10 else f"{v:.1f} s"
    if unit == "x":
        return f"{v:.2f}x" if v < 100 else f"{v:,.0f}x"
    return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"


def summarise(results: dict[str, list[dict]], profiles: list[str], shapes: list[str]) -> dict:
    """min / median over rounds per system and figure, the best Slurm profile per figure, ratios and goals."""
    def values(system: str, key: str) -> list[float]:
        return [r[key] for r in results.get(system, []) if r.get(key) is not None]

    table: dict = {}
    for key, _, _, higher in FIGURES:
        row: dict = {}
        for system in [f"slurm-{p}" for p in profiles] + shapes:
            v = values(system, key)
            if v:
                row[system] = {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}
        slurm = {s: r for s, r in row.items() if s.startswith("slurm-")}
        if slurm:
            pick = max if higher else min
            best = pick(slurm, key=lambda s: slurm[s]["median"])
            row["slurm_best"] = best
            for shape in shapes:
                if shape in row:
                    e, b = row[shape]["median"], slurm[best]["median"]
                    # ratio as "how many times better E31 is": rates E31/Slurm, times Slurm/E31
                    row[f"{shape}_ratio"] = e / b if higher else b / e
        table[key] = row
    goals = []
    for key, shape, kind, value in GOALS:
        row = table.get(key, {})
        if shape not in row:
            continue
        if kind == "vs_slurm":
            got = row.get(f"{shape}_ratio")
            if got is None:
                continue  # no Slurm measured
            met = got >= value
            goals.append({"figure": key, "shape": shape, "goal": f">= {value:g}x Slurm's best", "got": got,
                          "met": met})
        else:
            got = row[shape]["median"]
            goals.append({"figure": key, "shape": shape, "goal": f"<= {value:g}", "got": got, "met": got <= value})
    return {"figures": table, "goals": goals}


def report_rows(summary: dict, profiles: list[str], shapes: list[str],
                queued: int) -> tuple[list[str], list[list[str]]]:
    """The figures table: header and rows of text cells (min / median; * marks Slurm's best profile)."""
    systems = shapes + [f"slurm-{p}" for p in profiles]
    header = ["figure", *[f"E31 {s}" for s in shapes], *[f"Slurm {p}" for p in profiles],
              *[f"E31 {s} / Slurm" for s in shapes]]
    rows = []
    for key, label, unit, _ in FIGURES:
        row = summary["figures"].get(key, {})
        if not any(k in row for k in systems):
            continue
        cells = [label.format(queued=queued)]
        for system in systems:
            r = row.get(system)
            mark = " *" if row.get("slurm_best") == system else ""
            cells.append(f"{fmt(r['min'], unit)} / {fmt(r['median'], unit)}{mark}" if r else "-")
        for s in shapes:
            ratio = row.get(f"{s}_ratio")
            cells.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rows.append(cells)
    return header, rows


def goal_rows(summary: dict) -> list[list[str]]:
    rows = []
    for goal in summary["goals"]:
        unit = next(u for k, _, u, _ in FIGURES if k == goal["figure"])
        vs = "Slurm" in goal["goal"]
        rows.append([goal["figure"], goal["shape"], goal["goal"] + ("" if vs else f" {unit}"),
                     f"{goal['got']:.2f}x" if vs else fmt(goal["got"], unit), "met" if goal["met"] else "NOT MET"])
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def print_report(summary: dict, profiles: list[str], shapes: list[str], meta: dict) -> None:
    """The figures and the goals: as tables on the terminal, then the same in Markdown (for docs/benchmarks.md)."""
    out = Console(width=200)
    head = (f"E31 vs Slurm 22.05: {meta['rounds']} round(s) at commit {meta['commit']}, {meta['started']}; "
            f"{meta['host']}; load average {meta['load_start']} at start, {meta['load_end']} at end\n"
            f"sizes: {json.dumps(meta['sizes'])}")
    out.print("\n" + head)
    header, rows = report_rows(summary, profiles, shapes, meta["sizes"]["queued"])
    t = Table(title="min / median over rounds; E31 / Slurm = times better than Slurm's best profile (*), "
                    "by median (for times: Slurm / E31)")
    for c in header:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    out.print(t)
    g = Table(title="goals")
    ghead = ["figure", "shape", "goal", "measured (median)", "status"]
    for c in ghead:
        g.add_column(c)
    for r in goal_rows(summary):
        g.add_row(*r[:-1], f"[green]{r[-1]}" if r[-1] == "met" else f"[red]{r[-1]}")
    out.print(g)
    print("\n" + head + "\n\n" + markdown(header, rows) + "\n\n" + markdown(ghead, goal_rows(summary)))


def interleave(profiles: list[str], shapes: list[str]) -> list[tuple[str, str]]:
    """Slurm p1, E31 s1, Slurm p2, E31 s2, ... (the longer list continues alone)."""
    order = []
    for p, s in itertools.zip_longest(profiles, shapes):
        if p:
            order.append(("slurm", p))
        if s:
            order.append(("e31", s))
    return order


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="1 round, small sizes (~3-5 min); any size flag given still wins")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--profiles", nargs="*", default=["default", "lowlat"],
                        help="Slurm profiles (setup.sh PROFILE); default: default lowlat; none: E31 only")
    parser.add_argument("--shapes", nargs="*", default=["production", "make-run"],
                        choices=["production", "make-run"])
    parser.add_argument("--seconds", type=float, help="submit-rate window per phase (s)")
    parser.add_argument("--jobs", type=int, help="jobs per throughput run")
    parser.add_argument("--lat", type=int, help="submit-to-running samples per phase")
    parser.add_argument("--srun", type=int, help="srun samples per Slurm phase")
    parser.add_argument("--flat", type=int, help="serial submits per queue length")
    parser.add_argument("--flat-budget", type=float, help="stop a series of serial submits after (s), "
                                                           "keeping at least one")
    parser.add_argument("--queued", type=int, help="queue length for the flat-cost figure (0: skip)")
    parser.add_argument("--gap", type=float, default=1.0, help="Slurm idle gap before each latency sample, "
                                                               "plus rand(0..1) s (measure.sh LAT_GAP)")
    parser.add_argument("--drain-limit", type=float, default=300, help="give up a throughput run after (s)")
    parser.add_argument("--web", type=int, default=2, help="uvicorn processes in the production shape")
    parser.add_argument("--slurm-dir", type=Path, default=default_slurm_dir())
    parser.add_argument("--json", type=Path, help="also write every raw figure and the summary here")
    a = parser.parse_args()
    quick = {"rounds": 1, "seconds": 5, "jobs": 40, "lat": 8, "srun": 5, "flat": 5, "flat_budget": 20,
             "queued": 10_000}
    full = {"rounds": 3, "seconds": 8, "jobs": 100, "lat": 15, "srun": 10, "flat": 10, "flat_budget": 45,
            "queued": 10_000}
    sizes = quick if a.quick else full
    for k, v in sizes.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    slurm = Slurm(a.slurm_dir)
    if a.profiles:
        slurm.check()
    meta = {"commit": git_commit(), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "host": f"{os.cpu_count()} CPUs", "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "rounds": a.rounds, "profiles": a.profiles, "shapes": a.shapes,
            "sizes": {k: getattr(a, k) for k in ("seconds", "jobs", "lat", "srun", "flat", "flat_budget", "queued",
                                                 "gap", "web")},
            "database": env()["DATABASE_URL"], "redis": env()["REDIS_URL"]}
    results: dict[str, list[dict]] = {}
    try:
        for rnd in range(1, a.rounds + 1):
            for kind, name in interleave(a.profiles, a.shapes):
                step(f"[bold]round {rnd}/{a.rounds}: {kind} {name}")
                if kind == "slurm":
                    res = slurm_phase(slurm, name, a)
                    results.setdefault(f"slurm-{name}", []).append(res)
                    slurm.stop()  # nothing of Slurm runs during E31's phases
                else:
                    res = e31_phase(name, a)
                    results.setdefault(name, []).append(res)
                rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}
                console.print(f"          {json.dumps(rounded)}")
    finally:
        if a.profiles:
            slurm.stop()
    meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    summary = summarise(results, a.profiles, a.shapes)
    print_report(summary, a.profiles, a.shapes, meta)
    if a.json:
        a.json.write_text(json.dumps({"meta": meta, "raw": results, **summary}, indent=1, default=str))
    return summary


if __name__ == "__main__":
    main()
