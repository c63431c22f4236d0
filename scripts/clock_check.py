"""Fail when product code reads the wall clock itself instead of :func:`apps.core.clock.now` (issue 22;
run by ``make lint``).

The server has one clock (SPEC §4; docs/architecture.md): services take ``now=`` or ask
``apps.core.clock.now()``, which tests freeze (``tests/clock.py``). This check reads each module's
syntax tree, resolves the names its imports bind, and fails, naming file and line, on any use of:

- ``django.utils.timezone.now`` (``timezone.now()``, or ``now`` imported from it);
- ``datetime.datetime.now``, ``.utcnow`` and ``.today``; ``datetime.date.today``;
- ``timezone.localtime()`` and ``timezone.localdate()`` called with no time (they read ``now``).

A use counts whether called or passed on (``default=timezone.now``). ``apps/core/clock.py`` (the one
reader) and migrations are exempt; :data:`ALLOWED` lists files another branch converts, each of which
must still hold a use (an entry whose file is clean fails too, so the list only shrinks).

    .venv/bin/python scripts/clock_check.py [PATH ...]   # default: apps/

Exit status 0: no use outside the exemptions; 1: uses found (listed).
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = frozenset({
    "django.utils.timezone.now",
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
})
NOW_BY_DEFAULT = frozenset({"django.utils.timezone.localtime", "django.utils.timezone.localdate"})
EXEMPT = frozenset({"apps/core/clock.py"})
# Files allowed to read the wall clock directly (none: every module reads apps.core.clock).
ALLOWED: frozenset[str] = frozenset()


def _bound_names(tree: ast.Module) -> dict[str, str]:
    """``{local name: qualified name}`` for every name the module's imports bind (any scope)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _qualified(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The dotted name ``node`` stands for (``timezone.now`` -> ``django.utils.timezone.now``), or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    return ".".join([bound[node.id], *reversed(parts)])


def clock_reads(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """``(line, qualified name)`` of each use of a :data:`FORBIDDEN` clock in ``source``, in order.

    Raises:
        SyntaxError: ``source`` is not Python.
    """
    tree = ast.parse(source, filename)
    bound = _bound_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            name = _qualified(node, bound)
            if name in FORBIDDEN:
                found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and not node.args and not any(k.arg == "value" for k in node.keywords):
            name = _qualified(node.func, bound)
            if name in NOW_BY_DEFAULT:
                found.append((node.lineno, f"{name}()"))
    return sorted(found)


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _modules(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return [f for f in files if "migrations" not in f.parts and _display(f) not in EXEMPT]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "apps"],
                        help="files or directories to check (default: apps/)")
    args = parser.parse_args(argv)
    failures: list[str] = []
    checked = 0
    for path in _modules(args.paths):
        checked += 1
        shown = _display(path)
        reads = clock_reads(path.read_text(), str(path))
        if shown in ALLOWED:
            if not reads:
                failures.append(f"{shown}: reads no clock any more: take it out of ALLOWED "
                                f"({_display(Path(__file__))})")
            continue
        failures.extend(f"{shown}:{line}: {name} reads the wall clock; use apps.core.clock.now() "
                        "(or take now=)" for line, name in reads)
    for failure in failures:
        print(failure)
    if failures:
        print(f"{len(failures)} clock read(s) outside apps.core.clock", file=sys.stderr)
        return 1
    print(f"no clock read outside apps.core.clock in {checked} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
