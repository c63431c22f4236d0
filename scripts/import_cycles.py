"""Fail when any module under ``apps/`` is in an import cycle (issue 13; run by ``make lint``).

Every import counts, those inside functions too (grimp reads the whole module), so a cycle
cannot be hidden by moving an import into a function. Cycles are the strongly connected
components (Tarjan) of the import graph restricted to ``apps.*``; each is printed with one
shortest loop through it.

    .venv/bin/python scripts/import_cycles.py [--package apps] [--root DIR] [--allow-cycle a.b,a.c ...]

``--root`` is the directory the package is found in (default: the repository's root).

``--allow-cycle`` names one known cycle exactly (its modules, comma-separated): it is listed but
does not fail the check; any other cycle, or that one grown, still fails. Exit status 0: no cycle
(or only allowed ones); 1: cycles found (listed).
"""
from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def import_graph(package: str) -> dict[str, set[str]]:
    """``{module: modules of package it imports directly}`` (packages' ``__init__`` included)."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i.split(".")[0] == package}
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="apps")
    parser.add_argument("--root", type=Path, default=ROOT, help="the directory holding the package (default: the repo)")
    parser.add_argument("--allow-cycle", action="append", default=[], metavar="MODULES",
                        help="a known cycle, its modules comma-separated (listed, not failing)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.root.resolve()))
    allowed = [sorted(m.strip() for m in a.split(",") if m.strip()) for a in args.allow_cycle]
    edges = import_graph(args.package)
    found = cycles(edges)
    failing = [c for c in found if c not in allowed]
    for component in found:
        known = " (known, allowed)" if component not in failing else ""
        print(f"import cycle of {len(component)} modules{known}: {', '.join(component)}")
        print("  e.g. " + " -> ".join(shortest_loop(edges, component)))
    if failing:
        print(f"{len(failing)} import cycle(s) among {args.package}.* modules", file=sys.stderr)
        return 1
    print(f"no import cycle among {len(edges)} {args.package}.* modules" + (" but the allowed ones" if found else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
