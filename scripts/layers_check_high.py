"""Quick layer and cycle check of apps/ (issue 13) until the import-linter contract is merged.

Prints every import that goes up the layers of docs/architecture.md and every import cycle
among apps' modules, grouped by the layer of the importer. ``--only LAYER...`` limits the report
to importers in those layers (e.g. the upper ones). Exits 1 when it printed a violation.
"""
from __future__ import annotations

import argparse
import sys

import grimp

# Lowest first; "a | b" are siblings that must not import each other.
LAYERS = ["apps.core", "apps.artifacts | apps.tokens", "apps.pool", "apps.scheduling", "apps.metering",
          "apps.jobs", "apps.agent_api | apps.notices", "apps.web", "apps.live"]


def layer_of(module: str) -> tuple[int, str] | None:
    for i, layer in enumerate(LAYERS):
        for pkg in (p.strip() for p in layer.split("|")):
            if module == pkg or module.startswith(pkg + "."):
                return i, pkg
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    graph = grimp.build_graph("apps", include_external_packages=False)
    bad = 0
    for importer in sorted(graph.modules):
        here = layer_of(importer)
        if here is None or (args.only and here[1] not in args.only):
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            there = layer_of(imported)
            if there is None:
                continue
            up = there[0] > here[0] or (there[0] == here[0] and there[1] != here[1])
            if up:
                lines = graph.get_import_details(importer=importer, imported=imported)
                where = ", ".join(str(d["line_number"]) for d in lines)
                print(f"up: {importer} -> {imported} (line {where})")
                bad += 1
    seen: set[frozenset[str]] = set()
    for module in sorted(graph.modules):
        here = layer_of(module)
        if args.only and (here is None or here[1] not in args.only):
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                key = frozenset(chain)
                if key not in seen:
                    seen.add(key)
                    print("cycle: " + " -> ".join((module, *chain)))
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
