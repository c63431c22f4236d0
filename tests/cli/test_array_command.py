"""``e31 array ls|status|cancel`` against a stand-in API (tests/cli/fake_api.py, issue 28 item 3): what
each asks for, what it prints, and the exit code from the tasks' outcomes."""
from __future__ import annotations

import hashlib
import json

import httpx
from e31_cli.errors import Exit
from e31_cli.main import main

COUNTS = {"queued": 0, "rented": 0, "running": 1, "output": 0, "released": 2,
          "outcomes": {"failed": 1, "succeeded": 1}}
ARRAY = {"id": 7, "name": "sweep", "size": 3, "submitted_at": "2026-12-07T02:00:00Z", "counts": COUNTS}
TASKS = [
    {"id": 31, "array_index": 1, "state": "released", "outcome": "failed", "exit_code": 3,
     "status_message": "command exited with code 3", "cost": "0.010000"},
    {"id": 30, "array_index": 0, "state": "released", "outcome": "succeeded", "exit_code": 0, "cost": "0.020000"},
    {"id": 32, "array_index": 2, "state": "running", "outcome": None, "exit_code": None, "cost": "0.001000"},
]


def test_ls_shows_each_array_with_its_tasks_by_state(fake_api, capsys):
    fake_api.on("GET", "/arrays/", body={"results": [ARRAY], "next": None})
    assert main(["array", "ls"]) == Exit.OK
    out = capsys.readouterr().out
    assert "sweep" in out and "running 1, released 2 (failed 1, succeeded 1)" in out


def test_status_lists_every_task_by_index_with_its_reason_and_exits_3_while_one_runs(fake_api, capsys):
    fake_api.on("GET", "/arrays/7/", body=ARRAY)
    fake_api.on("GET", "/jobs/", body={"results": TASKS, "next": None})
    assert main(["array", "status", "7"]) == Exit.PENDING
    assert fake_api.calls[1].url.params["array"] == "7"
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    assert "command exited with code 3" in lines[1] and "$0.01" in lines[1]  # to the cent


def test_cancel_says_what_it_did(fake_api, capsys):
    fake_api.on("POST", "/arrays/7/cancel/", body={"released": 4, "stopping": 2, "array": ARRAY})
    assert main(["array", "cancel", "7"]) == Exit.OK
    assert "4 queued task(s) released, 2 running task(s) stopping" in capsys.readouterr().out


def test_status_json_carries_the_tasks(fake_api, capsys):
    fake_api.on("GET", "/arrays/7/", body=ARRAY)
    fake_api.on("GET", "/jobs/", body={"results": TASKS[:2], "next": None})
    assert main(["array", "status", "7", "--json"]) == Exit.JOB_FAILED
    assert [t["id"] for t in json.loads(capsys.readouterr().out)["tasks"]] == [31, 30]


def _tar(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_get_array_fetches_every_released_task_s_outputs_into_its_own_dir(fake_api, capsys, tmp_path):
    archives = {}
    for task in TASKS:
        if task["state"] != "released":
            continue
        data = {"out.txt": f"task {task['array_index']}\n".encode()}
        archive = _tar(data)
        archives[task["id"]] = archive
        manifest = [{"path": n, "size_bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in data.items()]
        job = {**task, "bundle": {"rank": 0, "size_bytes": len(archive), "sha256": hashlib.sha256(archive).hexdigest(),
                                  "files": manifest}}
        fake_api.on("GET", f"/jobs/{task['id']}/", body=job)
        fake_api.on("GET", f"/jobs/{task['id']}/bundle/", lambda _request, a=archive: httpx.Response(200, content=a))
    fake_api.on("GET", "/jobs/", body={"results": TASKS, "next": None})
    out_dir = tmp_path / "got"
    assert main(["get", "--array", "7", "-o", str(out_dir)]) == Exit.PENDING  # task 2 still runs
    assert (out_dir / "task-0" / "out.txt").read_text() == "task 0\n"
    assert (out_dir / "task-1" / "out.txt").read_text() == "task 1\n"
    assert not (out_dir / "task-2").exists()
    assert "2 bundle(s)" in capsys.readouterr().out
