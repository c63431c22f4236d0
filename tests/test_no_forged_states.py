"""No test forges a state (issue 13): states, outcomes, attempts and their time stamps are reached
through the services (tests/drive.py) on a frozen clock (tests/clock.py), never written.

The check reads every test module's syntax tree and fails, naming file and line, on:

- ``.update(...)``, ``.create(...)``, ``.bulk_create(...)``, ``.get_or_create(...)``,
  ``.update_or_create(...)`` given a state column or a stamp the services set (:data:`FORGED`),
  or given ``**fields`` (what they hold cannot be checked);
- an assignment to ``<row>.state``, ``.outcome`` or ``.attempt`` (``self.state`` of a test double aside);
- rows of the job's life made directly: ``Job``, ``JobEvent``, ``Lease``, ``LeaseGpu``, ``AgentReport``
  through ``.objects.create`` or ``.objects.bulk_create``.

A test of a checker that must see a broken ledger (``meter_check``) may break it on purpose: the
statement's first line then says ``# forged on purpose`` and why.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PRAGMA = "# forged on purpose"
FORGED = frozenset({
    "state", "outcome", "end_reason", "attempt", "exit_code", "cancel_requested_at", "submitted_at", "rented_at",
    "run_started_at", "run_ended_at", "released_at", "accepted_at", "staging_seconds", "fenced_at",
    "fence_lifted_at", "billed_seconds", "queue_position", "pending_reason", "estimated_start_at",
    "last_heartbeat_at",
})
WRITES = frozenset({"update", "create", "bulk_create", "get_or_create", "update_or_create"})
LIFE_ROWS = frozenset({"Job", "JobEvent", "Lease", "LeaseGpu", "AgentReport"})
ASSIGNED = frozenset({"state", "outcome", "attempt"})


def _forgeries(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        if PRAGMA not in lines[node.lineno - 1]:
            found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}: {what}")

    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            names = {k.arg for k in node.keywords}
            if names & FORGED:
                flag(node, f".{node.func.attr}() writes {sorted(names & FORGED)}")
            elif (None in names and node.func.attr in ("update", "update_or_create")
                  and not isinstance(node.func.value, ast.Name)):  # a query's update, not a dict's
                flag(node, f".{node.func.attr}(**...) writes columns this check cannot see")
            manager = node.func.value
            if (node.func.attr in ("create", "bulk_create") and isinstance(manager, ast.Attribute)
                    and manager.attr == "objects" and isinstance(manager.value, ast.Name)
                    and manager.value.id in LIFE_ROWS):
                flag(node, f"{manager.value.id}.objects.{node.func.attr}() skips the services")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (isinstance(target, ast.Attribute) and target.attr in ASSIGNED
                        and not (isinstance(target.value, ast.Name) and target.value.id == "self")):
                    flag(node, f"assigns .{target.attr}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_no_test_writes_a_state_or_a_stamp_the_services_own():
    found = [line for path in sorted(TESTS.rglob("*.py")) if path.name != Path(__file__).name
             for line in _forgeries(path)]
    assert not found, "drive the job through the services (tests/drive.py) instead:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_forgery(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.TESTS", tmp_path)
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        'Job.objects.filter(pk=1).update(state="running")\n'
        'Lease.objects.filter(pk=1).update(rented_at=at)\n'
        'Job.objects.filter(pk=1).update(**fields)\n'
        'environ.update(**extra)\n'
        'job.state = "released"\n'
        'Lease.objects.create(job=job)\n'
        'Lease.objects.filter(pk=1).update(released_at=at)  # forged on purpose: the checker must see it\n'
        'self.state = State()\n'
        'LeaseGpu.objects.filter(lease=lease).update(open=False)\n')
    assert [line.split(": ", 1)[0] for line in _forgeries(sample)] == [
        f"{tmp_path.name}/test_sample.py:{n}" for n in (1, 2, 3, 5, 6)]
