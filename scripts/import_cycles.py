"""Fail when any module of the repository's packages is in an import cycle (issues 13, 22; run by
``make lint``).

The packages: ``apps`` (``apps/``), ``e31_agent`` (``agent/``), ``e31_cli`` (``cli/``) and
``e31_protocol`` (``protocol/``) by default, or those named on the command line. Every import
counts, those inside functions and under ``if TYPE_CHECKING:`` too (grimp reads the whole module),
so a cycle cannot be hidden by moving an import into a function or behind a type-checking guard.
Cycles are the strongly connected components (Tarjan) of the import graph restricted to the
packages' modules (one graph for all of them, so a cycle across two packages counts too); each
is printed with one shortest loop through it.

    .venv/bin/python scripts/import_cycles.py [PACKAGE ...] [--root DIR] [--allow-cycle a.b,a.c ...]

``--root`` is a directory searched for the packages first (default: the repository's root).

A package is found on ``sys.path`` (the repository root first, then the installed packages,
``PYTHONPATH`` included). ``--allow-cycle`` names one known cycle exactly (its modules,
comma-separated): it is listed but does not fail the check; any other cycle, or that one grown,
still fails. Exit status 0: no cycle (or only allowed ones); 1: cycles found (listed); 2: usage
error (argparse), or a package that cannot be found.
"""
from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("apps", "e31_agent", "e31_cli", "e31_protocol")  # apps/, agent/, cli/, protocol/


def import_graph(*packages: str) -> dict[str, set[str]]:
    """``{module: modules of the packages it imports directly}`` (packages' ``__init__`` included;
    imports under ``TYPE_CHECKING`` too).

    Raises:
        ValueError: no package given, or one that is not on ``sys.path`` (grimp's message names it).
    """
    if not packages:
        raise ValueError("no package to check")
    graph = grimp.build_graph(*packages, cache_dir=None, exclude_type_checking_imports=False)
    roots = set(packages)
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i.split(".")[0] in roots}
            for m in graph.modules}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def shortest_loop(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest import loop through the component's first module (breadth-first)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges.get(node, ())):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start, start]


def main(argv: list[str] | None = None) -> int:
    """Run the check on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", metavar="PACKAGE",
                        help=f"top-level packages to check (default: {' '.join(PACKAGES)})")
    parser.add_argument("--package", action="append", default=[], dest="package_options", metavar="PACKAGE",
                        help="a package to check, as a positional PACKAGE (kept for older callers)")
    parser.add_argument("--allow-cycle", action="append", default=[], metavar="MODULES",
                        help="a known cycle, its modules comma-separated (listed, not failing)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="a directory searched for the packages first (default: the repo)")
    args = parser.parse_args(argv)
    packages = list(dict.fromkeys([*args.packages, *args.package_options])) or list(PACKAGES)
    sys.path.insert(0, str(args.root.resolve()))
    allowed = [sorted(m.strip() for m in a.split(",") if m.strip()) for a in args.allow_cycle]
    try:
        edges = import_graph(*packages)
    except (ValueError, ModuleNotFoundError) as exc:  # grimp's own message names the package
        print(f"cannot check the imports: {exc}", file=sys.stderr)
        return 2
    found = cycles(edges)
    names = ", ".join(f"{p}.*" for p in packages)
    failing = [c for c in found if c not in allowed]
    for component in found:
        known = " (known, allowed)" if component not in failing else ""
        print(f"import cycle of {len(component)} modules{known}: {', '.join(component)}")
        print("  e.g. " + " -> ".join(shortest_loop(edges, component)))
    if failing:
        print(f"{len(failing)} import cycle(s) among {names} modules", file=sys.stderr)
        return 1
    print(f"no import cycle among {len(edges)} {names} modules" + (" but the allowed ones" if found else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
