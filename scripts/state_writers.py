"""Fail when product code writes a state or a stamp outside its one door (issue 22 item 3; run by
``make lint``, needs no database).

Each stateful model has one writer (docs/architecture.md):

- a job's state, outcome, end and the stamps of its moves: :mod:`apps.jobs.state` only;
- every field of a lease (its state, stamps, meter figures) and its GPUs' ``open``, and the
  making of lease rows: :mod:`apps.metering.lease` only;
- a node's state and a GPU's quarantine: :mod:`apps.pool.state` only.

The check reads the syntax tree of every module under the given folders (default ``apps/``,
migrations aside) and names file and line of each write elsewhere:

- ``.update(...)``, ``.create(...)``, ``.get_or_create(...)``, ``.update_or_create(...)`` and
  ``.bulk_update(rows, [fields])`` of a guarded model given a guarded field (or ``**fields``,
  which cannot be checked);
- an assignment ``<row>.<field> = ...`` and ``<row>.save(update_fields=[...])`` naming a guarded field;
- ``Lease(...)``, ``LeaseGpu(...)``, ``Lease.objects.create`` or ``.bulk_create`` of lease rows.

The model of a write is read from the statement: a model name in the chain (``Job.objects...``),
a related manager (``job.leases...``), the row's variable name (``lease``, ``job``, ``node``), or,
for a queryset in a variable, a field only that model has (``fenced_at``, ``accepted_at``...).

    .venv/bin/python scripts/state_writers.py [folder ...]

Exit status 0: no write outside its door; 1: writes found (listed).
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOB = frozenset({"state", "outcome", "end_reason", "exit_code", "rented_at", "run_started_at", "run_ended_at",
                 "released_at"})
LEASE = frozenset({"state", "rented_at", "accepted_at", "run_ended_at", "released_at", "seen_at", "billed_seconds",
                   "cost", "charged", "end_reason", "staging_seconds", "fenced_at", "fence_lifted_at",
                   "time_limit_s", "rate_per_gpu_hour", "gpu_count", "attempt", "node_rank"})
LEASE_ONLY = frozenset({"accepted_at", "seen_at", "billed_seconds", "charged", "staging_seconds", "fenced_at",
                        "fence_lifted_at"})  # fields no other model has: they name the model of a queryset
LEASE_GPU = frozenset({"open"})
NODE = frozenset({"state"})
GPU = frozenset({"quarantine_reason", "quarantined_at"})

# model -> (guarded fields, the one module that may write them)
DOORS: dict[str, tuple[frozenset[str], str]] = {
    "Job": (JOB, "apps/jobs/state.py"),
    "Lease": (LEASE, "apps/metering/lease.py"),
    "LeaseGpu": (LEASE_GPU, "apps/metering/lease.py"),
    "Node": (NODE, "apps/pool/state.py"),
    "Gpu": (GPU, "apps/pool/state.py"),
}
RELATED = {"leases": "Lease", "lease_gpus": "LeaseGpu", "jobs": "Job", "nodes": "Node", "gpus": "Gpu"}
WRITES = frozenset({"update", "create", "get_or_create", "update_or_create"})
ROWS_MADE = frozenset({"Lease", "LeaseGpu"})


def _model_of_name(name: str) -> str | None:
    """The model a row variable holds, by its name (``lease``, ``other_lease``, ``job``, ``node``)."""
    low = name.lower()
    if "lease_gpu" in low or low == "lg":
        return "LeaseGpu"
    for word, model in (("lease", "Lease"), ("job", "Job"), ("node", "Node")):
        if low == word or low.endswith("_" + word) or low.startswith(word + "_"):
            return model
    return None


def _chain_model(expr: ast.AST) -> tuple[str | None, bool]:
    """``(model, certain)`` of the query or row ``expr`` (a chain of attributes and calls)."""
    while True:
        if isinstance(expr, ast.Call):
            expr = expr.func
        elif isinstance(expr, ast.Attribute):
            if expr.attr in RELATED:
                return RELATED[expr.attr], True
            if isinstance(expr.value, ast.Name) and expr.value.id in DOORS:
                return expr.value.id, True
            expr = expr.value
        elif isinstance(expr, ast.Name):
            return (expr.id, True) if expr.id in DOORS else (_model_of_name(expr.id), False)
        else:
            return None, False


def _strings(node: ast.AST | None) -> set[str]:
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def writes_outside_doors(path: Path, rel: str) -> list[str]:
    """The guarded writes in module ``path`` (shown as ``rel``) that its door does not make."""
    found: list[str] = []

    def flag(node: ast.AST, model: str, what: str) -> None:
        fields, door = DOORS[model]
        if rel != door:
            found.append(f"{rel}:{node.lineno}: {what} ({model}: only {door} writes it)")

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ROWS_MADE:
            flag(node, node.func.id, f"{node.func.id}(...) makes a row")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, target = node.func.attr, node.func.value
            model, certain = _chain_model(target)
            names = {k.arg for k in node.keywords}
            if attr in WRITES | {"bulk_create"} and model in ROWS_MADE and certain and attr != "update":
                flag(node, model, f".{attr}() makes {model} rows")
                continue
            if attr in WRITES:
                if model is None and names & LEASE_ONLY:
                    model = "Lease"  # a queryset in a variable: a field only a lease has names it
                if model is None:
                    continue  # a dict's update, a queryset of another model
                fields = DOORS[model][0]
                if names & fields:
                    flag(node, model, f".{attr}() writes {sorted(names & fields)}")
                elif None in names and attr in ("update", "update_or_create") and certain:
                    flag(node, model, f".{attr}(**...) writes columns this check cannot see")
            elif attr == "bulk_update" and model is not None and len(node.args) > 1:
                written = _strings(node.args[1]) & DOORS[model][0]
                if written:
                    flag(node, model, f".bulk_update() writes {sorted(written)}")
            elif attr == "save" and isinstance(target, ast.Name) and model is not None:
                update = next((k.value for k in node.keywords if k.arg == "update_fields"), None)
                written = _strings(update) & DOORS[model][0]
                if written:
                    flag(node, model, f".save() writes {sorted(written)}")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(one, ast.Attribute) and isinstance(one.value, ast.Name):
                        model = _model_of_name(one.value.id)
                        if model is not None and one.attr in DOORS[model][0]:
                            flag(node, model, f"assigns {one.value.id}.{one.attr}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def check(folders: Iterable[Path], root: Path = ROOT) -> list[str]:
    """Every guarded write outside its door in the modules under ``folders`` (migrations aside)."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.resolve().relative_to(root.resolve()).as_posix() if path.resolve().is_relative_to(
                root.resolve()) else path.as_posix()
            found += writes_outside_doors(path, rel)
    return found


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or [ROOT / "apps"]
    found = check(folders)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} write(s) of a state or a stamp outside its one door", file=sys.stderr)
        return 1
    print(f"states written only through their doors ({', '.join(sorted({d for _, d in DOORS.values()}))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
