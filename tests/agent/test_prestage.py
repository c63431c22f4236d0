"""The agent's pre-stager: queued jobs' inputs into the node cache, meter off, progress reported."""

import threading
import time
from pathlib import Path

from e31_agent.cache import InputCache
from e31_agent.config import Workdir
from e31_agent.models import DataItem, PrestageOffer, WorkAnswer
from e31_agent.node_inputs import NodeInputs
from e31_agent.prestage import Prestager
from e31_protocol.inputs import input_identity


class _Client:
    """The two calls the pre-stager makes (the HTTP side is tested in test_client and e2e)."""

    server = "http://site"

    def __init__(self) -> None:
        self.reports: list[dict] = []
        self.lock = threading.Lock()

    def prestage_report(self, jobs):
        with self.lock:
            self.reports.extend(jobs)
        return [j["job_id"] for j in jobs]


def _wait(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _setup(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    workdir = Workdir(tmp_path / "work")
    workdir.create()
    inputs = NodeInputs(InputCache(workdir.cache), (src,))
    client = _Client()
    stop = threading.Event()
    return src, workdir, inputs, client, stop


def test_it_fills_the_cache_and_reports_done(tmp_path):
    src, workdir, inputs, client, stop = _setup(tmp_path)
    (src / "a.bin").write_bytes(b"a" * 3000)
    prestager = Prestager(client=client, workdir=workdir, inputs=inputs, stop=stop).start()
    try:
        answer = WorkAnswer.from_json({"prestage": [
            {"job_id": 7, "new": True, "data": [{"source": (src / "a.bin").as_uri(), "target": "in/"}]}]})
        prestager.update(answer.prestage)
        assert _wait(lambda: any(r["state"] == "done" for r in client.reports))
    finally:
        stop.set()
    done = [r for r in client.reports if r["state"] == "done"][-1]
    assert done == {"job_id": 7, "state": "done", "bytes_done": 3000, "bytes_total": 3000}
    assert inputs.cache.total_bytes == 3000
    assert not any((workdir.jobs).iterdir())  # nothing in a job dir: no job there yet
    # what the heartbeat tells the server: the input's identity (e31_protocol.inputs)
    assert input_identity((src / "a.bin").as_uri(), owner=None) in inputs.cache.identities()


def test_a_failed_input_is_reported_with_its_reason(tmp_path):
    src, workdir, inputs, client, stop = _setup(tmp_path)
    prestager = Prestager(client=client, workdir=workdir, inputs=inputs, stop=stop).start()
    try:
        prestager.update([PrestageOffer(8, [DataItem(source="file:///etc/passwd")])])
        assert _wait(lambda: any(r["state"] == "failed" for r in client.reports))
    finally:
        stop.set()
    [failed] = [r for r in client.reports if r["state"] == "failed"]
    assert "file:// is only allowed" in failed["message"]
    assert inputs.cache.total_bytes == 0


def test_a_job_dropped_from_the_list_is_abandoned_unless_assigned_here(tmp_path, monkeypatch):
    src, workdir, inputs, client, stop = _setup(tmp_path)
    (src / "big.bin").write_bytes(b"b" * (3 << 20))
    import e31_agent.staging as staging

    monkeypatch.setattr(staging, "CHUNK", 1024)  # many small steps, so the drop lands mid-way
    gate = threading.Event()
    real_write = staging.Stager._write

    def slow_write(self, *a, **kw):
        gate.wait(5)
        return real_write(self, *a, **kw)

    monkeypatch.setattr(staging.Stager, "_write", slow_write)
    prestager = Prestager(client=client, workdir=workdir, inputs=inputs, stop=stop).start()
    offer = PrestageOffer(9, [DataItem(source=(src / "big.bin").as_uri())])
    try:
        prestager.update([offer])
        time.sleep(0.2)
        prestager.update([])  # the plan moved: stop
        gate.set()
        assert _wait(lambda: prestager.current is None)
        assert inputs.cache.total_bytes == 0
        gate.clear()
        prestager.update([offer])
        time.sleep(0.2)
        prestager.update([], assigned=[9])  # rented here: the download goes on for the job
        gate.set()
        assert _wait(lambda: inputs.cache.total_bytes == 3 << 20)
    finally:
        stop.set()
        gate.set()
