"""Usage samples (e31_agent.sampler): a real process tree's CPU and memory, the posts to the
server, a server without the call, and the whole agent sampling a running job."""

import subprocess
import sys
import threading
import time

import psutil
import pytest
from e31_agent.agent import Agent
from e31_agent.client import ApiClient
from e31_agent.config import AgentConfig
from e31_agent.models import JobRef
from e31_agent.sampler import NvmlGpus, ProcessTreeMeter, UsageSampler

from .fake_server import TOKEN, FakeServer
from .test_agent import assignment, job_processes, offer

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
HOLD = "import time\nx = bytearray(64 * 1024 * 1024)\nx[::4096] = b'x' * len(x[::4096])\ntime.sleep(30)\n"


@pytest.fixture
def tree():
    """A shell with two python children: one spinning on a CPU, one holding 64 MiB."""
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c \"$BUSY\" & {sys.executable} -c \"$HOLD\" & wait"],
                             env={"BUSY": BUSY, "HOLD": HOLD, "PATH": "/usr/bin:/bin"})
    root = psutil.Process(shell.pid)
    end = time.monotonic() + 10
    while len(root.children(recursive=True)) < 2 and time.monotonic() < end:
        time.sleep(0.02)
    yield root
    for proc in root.children(recursive=True):
        proc.kill()
    shell.kill()
    shell.wait()


def tree_of(root: psutil.Process):
    def processes():
        try:
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
    return processes


def test_a_busy_process_tree_shows_cpu_and_resident_memory(tree):
    meter = ProcessTreeMeter(tree_of(tree))
    assert meter.measure()[0] == 0.0  # the baseline: no window yet
    time.sleep(1.0)
    cpu, rss = meter.measure()
    assert cpu > 0.0  # the spinning child (the shared test machine is loaded: no figure is promised)
    assert cpu < 100.0 * (psutil.cpu_count() or 1) + 5
    assert rss > 64 * 1024 * 1024  # the held 64 MiB, plus the interpreters


def test_a_process_born_between_samples_counts_its_cpu(tmp_path):
    spawned: list[psutil.Process] = []
    meter = ProcessTreeMeter(lambda: spawned)
    meter.measure()
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        spawned.append(psutil.Process(child.pid))
        time.sleep(0.8)
        cpu, rss = meter.measure()
        assert cpu > 0.0 and rss > 0
    finally:
        child.kill()
        child.wait()


def test_ended_processes_are_skipped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = psutil.Process(child.pid)
    child.wait()
    meter = ProcessTreeMeter(lambda: [proc])
    assert meter.measure() == (0.0, 0)


def test_no_nvml_gpus_without_gpus():
    gpus = NvmlGpus([])
    assert not gpus.ok and gpus.read() == []


def test_samples_are_posted_in_batches_without_gpu_figures_on_a_simulated_node(tree):
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN)
        abort = threading.Event()
        sampler = UsageSampler(client, JobRef(5, 1), tree_of(tree), gpus=[{"index": 0, "uuid": "GPU-x"}],
                               real_gpus=False, abort=abort, interval_s=0.5, per_post=2)
        sampler.start()
        assert server.state.wait_for(lambda: len(server.state.sample_posts) >= 1, timeout_s=10)
        assert sampler.finish(timeout_s=5)
        samples = server.state.samples[(5, 1)]
        assert len(samples) >= 2 and len(samples) == sampler.stored
        seqs = [s["seq"] for s in samples]
        assert seqs == sorted(set(seqs))
        assert all(s["rss_bytes"] > 0 and s["ago_s"] >= 0 and "gpus" not in s for s in samples)
        assert any(s["cpu_percent"] > 0 for s in samples)
        assert {p["gpu_source"] for p in server.state.sample_posts} == {"simulated"}
        assert len(server.state.sample_posts[0]["samples"]) == 2
        client.close()


def test_a_server_without_the_call_ends_the_sampling_not_the_run(tree):
    with FakeServer() as server:
        server.state.samples_call = False
        client = ApiClient(server.url, TOKEN)
        abort = threading.Event()
        sampler = UsageSampler(client, JobRef(6, 1), tree_of(tree), gpus=[], real_gpus=True, abort=abort,
                               interval_s=0.5, per_post=1)
        sampler.start()
        assert server.state.wait_for(lambda: sampler.refused, timeout_s=10)
        assert sampler.finish(timeout_s=5) and not abort.is_set()
        assert sampler.pending == type(sampler.pending)(maxlen=sampler.pending.maxlen)
        client.close()


def test_samples_wait_through_an_outage_and_go_with_the_next_post(tree):
    with FakeServer() as server:
        server.state.fail[("POST", "/api/v1/agent/jobs/7/samples/")] = [503, 503]
        client = ApiClient(server.url, TOKEN)
        sampler = UsageSampler(client, JobRef(7, 1), tree_of(tree), gpus=[], real_gpus=False,
                               abort=threading.Event(), interval_s=0.5, per_post=1)
        sampler.start()
        assert server.state.wait_for(lambda: len(server.state.samples[(7, 1)]) >= 3, timeout_s=15)
        sampler.finish(timeout_s=5)
        seqs = [s["seq"] for s in server.state.samples[(7, 1)]]
        assert seqs == sorted(seqs) and len(seqs) >= 3  # the samples of the failed posts came later
        assert len(server.state.sample_posts[0]["samples"]) >= 3
        client.close()


def test_the_agent_samples_a_running_job(tmp_path):
    with FakeServer() as server:
        workdir = tmp_path / "w"
        agent = Agent(AgentConfig(server=server.url, token=TOKEN, workdir=workdir, simulate="1xH100-80GB",
                                  shutdown_grace_s=1, sample_interval_s=0.5))
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        try:
            offer(server, assignment(21, f"{sys.executable} -c 'import time\nend=time.time()+2.5\n"
                                         f"while time.time()<end: pass'", gpus=[0]))
            assert server.state.wait_for(lambda: "finished" in server.state.types(21), timeout_s=30)
            samples = server.state.samples[(21, 1)]
            assert len(samples) >= 2
            assert any(s["cpu_percent"] > 0 for s in samples) and all(s["rss_bytes"] > 0 for s in samples)
            assert {p["gpu_source"] for p in server.state.sample_posts} == {"simulated"}
        finally:
            agent.stop()
            thread.join(20)
        assert job_processes(workdir) == []


class FakeNvml:
    """Stands in for ``pynvml`` on a machine without GPUs: two devices by UUID, the second one's
    utilisation unreadable (as NVML says "not supported" on some cards)."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in (b"GPU-a", b"GPU-b"):
            raise self.NVMLError("not found")
        return uuid

    def nvmlDeviceGetHandleByIndex(self, index):
        return {0: b"GPU-a", 1: b"GPU-b"}[index]

    def nvmlDeviceGetUtilizationRates(self, handle):
        if handle == b"GPU-b":
            raise self.NVMLError("not supported")
        return type("Util", (), {"gpu": 73, "memory": 10})()

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Mem", (), {"used": 3 * 2**30 if handle == b"GPU-a" else 2**20, "total": 80 * 2**30})()


def test_nvml_figures_of_the_jobs_gpus(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus = NvmlGpus([{"index": 3, "uuid": "GPU-a"}, {"index": 1, "uuid": ""}])  # no uuid: by index
    assert gpus.ok and fake.inits == 1
    assert gpus.read() == [{"index": 3, "gpu_util_percent": 73, "gpu_memory_bytes": 3 * 2**30},
                           {"index": 1, "gpu_util_percent": None, "gpu_memory_bytes": 2**20}]
    gpus.close()
    assert fake.inits == 0 and gpus.read() == []


def test_a_short_run_gets_a_sample_at_the_default_interval(tmp_path):
    with FakeServer() as server:
        agent = Agent(AgentConfig(server=server.url, token=TOKEN, workdir=tmp_path / "w", simulate="1xH100-80GB",
                                  shutdown_grace_s=1))
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        try:
            offer(server, assignment(22, "sleep 2", gpus=[0]))
            assert server.state.wait_for(lambda: "finished" in server.state.types(22), timeout_s=30)
            assert len(server.state.samples[(22, 1)]) >= 1  # the first sample comes after 1 s, not 5
        finally:
            agent.stop()
            thread.join(20)
