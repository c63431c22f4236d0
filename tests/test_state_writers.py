"""The product-code check of issue 22 item 3 (``scripts/state_writers.py``, run by ``make lint``):
the product passes it, and each kind of write outside its door, planted in a module of a tmp
folder, fails it with file and line. Needs no database."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "state_writers.py"
_spec = importlib.util.spec_from_file_location("state_writers", SCRIPT)
state_writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(state_writers)

BAD = '''\
def settle(job, lease, node, fenced, now):
    Job.objects.filter(pk=job.pk).update(state="released", released_at=now)
    job.outcome = "succeeded"
    Lease.objects.filter(pk=lease.pk).update(rented_at=now)
    lease.released_at = now
    lease.save(update_fields=["released_at"])
    fenced.update(fence_lifted_at=now)
    job.leases.filter(attempt=1).update(accepted_at=now)
    LeaseGpu.objects.filter(lease=lease).update(open=False)
    Lease.objects.create(job=job, node=node)
    node.state = "down"
    Node.objects.filter(pk=node.pk).update(state="down")
    Node.objects.filter(pk=node.pk).update(**fields)
    Job.objects.bulk_update(jobs, ["state", "queue_position"])
'''
GOOD = '''\
def fine(job, values, prestage_row, now):
    values.update(state="queued")  # a dict
    prestage_row.state = "fetching"  # another model's state
    Job.objects.filter(pk=job.pk).update(status_message="running", cancel_requested_at=now)
    Job.objects.bulk_update(jobs, ["queue_position"])
'''


def test_the_product_writes_each_state_only_through_its_door():
    found = state_writers.check([ROOT / "apps"], ROOT)
    assert not found, "\n".join(found)


def test_the_check_fails_on_each_kind_of_planted_write(tmp_path):
    (tmp_path / "apps" / "web").mkdir(parents=True)
    (tmp_path / "apps" / "web" / "bad.py").write_text(BAD)
    (tmp_path / "apps" / "web" / "good.py").write_text(GOOD)
    found = state_writers.check([tmp_path / "apps"], tmp_path)
    lines = sorted(int(line.split(":")[1]) for line in found)
    assert lines == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], "\n".join(found)
    assert all(line.startswith("apps/web/bad.py:") for line in found)
    assert "apps/web/bad.py:2: .update() writes ['released_at', 'state'] (Job: only apps/jobs/state.py" in found[0]
    assert any("Lease.objects.create" in line or ".create() makes Lease rows" in line for line in found)
    assert any("only apps/pool/state.py" in line for line in found)


def test_the_door_itself_may_write(tmp_path):
    (tmp_path / "apps" / "pool").mkdir(parents=True)
    (tmp_path / "apps" / "pool" / "state.py").write_text('def move(node):\n    node.state = "down"\n')
    (tmp_path / "apps" / "metering").mkdir()
    (tmp_path / "apps" / "metering" / "lease.py").write_text('def move(node):\n    node.state = "down"\n')
    found = state_writers.check([tmp_path / "apps"], tmp_path)
    assert found == ["apps/metering/lease.py:2: assigns node.state (Node: only apps/pool/state.py writes it)"]


def test_the_script_exits_1_naming_the_line(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "bad.py:2:" in run.stdout and "outside its one door" in run.stderr
    ok = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout
