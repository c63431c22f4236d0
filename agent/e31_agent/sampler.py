"""Usage samples of a running job (protocol: "samples"): its process tree's CPU and memory and,
on a node with real GPUs, each held GPU's utilisation and memory, for the job page's charts.

Every ``interval_s`` (default :data:`INTERVAL_S`, ``--sample-interval``) while the command runs,
the first one :data:`FIRST_S` after the start:

- ``cpu_percent``: CPU seconds (user + system) the job's processes used since the last sample,
  over the wall seconds between them, times 100: percent of one CPU, as ``top`` counts it
  (250 = two and a half CPUs busy). A process that starts and ends between two samples is not
  seen; one started since the last sample (within :data:`CREATE_SLACK_S`) counts all its CPU
  time.
- ``rss_bytes``: the sum of the processes' resident set sizes (shared pages count once per
  process, as ``ps`` adds them up).
- ``gpus`` (only where NVML reads the real GPUs held by the job): per GPU, NVML's utilisation
  (percent of its last sample period the device was busy) and device memory in use (bytes).
  A simulated node sends ``gpu_source: "simulated"`` and no GPU figures: nothing made up is
  ever shown as measured.

The processes are those :meth:`e31_agent.runner.JobProcess.processes` finds (the shim's
descendants, the shell's group, the run's marker), whatever user the sandbox runs them as.
Samples are posted every ``per_post`` samples and once more at the end, one try each; through
an outage they wait (at most :data:`PENDING_MAX`, the oldest dropped first) and go with the next
post. A refusal (stale attempt, or a server without the call: 404) ends the sampling, never the
run: the charts are a nicety, the job's reports and log are what count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import psutil
from e31_protocol import SAMPLES_PER_POST_MAX, HealthSource, payloads

from .client import Aborted, ApiClient, ApiError
from .models import JobRef

log = logging.getLogger(__name__)

INTERVAL_S = 5.0  # seconds between samples
FIRST_S = 1.0  # seconds from the start to the first sample (at most)
PER_POST = 3  # samples per post: one post every 15 s at the default interval
PENDING_MAX = 720  # samples kept through an outage (an hour at 5 s)
# psutil's create_time is the boot time (whole seconds in /proc/stat) plus clock ticks: up to a
# second early, so "born since the last sample" allows that much.
CREATE_SLACK_S = 1.0


class ProcessTreeMeter:
    """CPU percent and RSS bytes of a changing set of processes (``processes()`` lists them now).

    Call :meth:`measure` once to set the baseline; each later call answers
    ``(cpu_percent, rss_bytes)`` since the call before.
    """

    def __init__(self, processes: Callable[[], Sequence[psutil.Process]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.processes = processes
        self.clock = clock
        self._cpu: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU seconds at the last call
        self._at: float | None = None  # clock at the last call
        self._wall: float | None = None  # epoch seconds at the last call

    def measure(self) -> tuple[float, int]:
        """``(cpu_percent, rss_bytes)``; the first call answers 0.0 for the CPU (no baseline)."""
        now, wall = self.clock(), time.time()
        used, rss = 0.0, 0
        seen: dict[tuple[int, float], float] = {}
        for proc in self.processes():
            try:
                with proc.oneshot():
                    created = proc.create_time()
                    times = proc.cpu_times()
                    resident = proc.memory_info().rss
            except psutil.Error:
                continue  # gone meanwhile, or not ours to read
            cpu = float(times.user + times.system)
            key = (proc.pid, created)
            seen[key] = cpu
            rss += int(resident)
            before = self._cpu.get(key)
            if before is not None:
                used += max(0.0, cpu - before)
            elif self._wall is not None and created >= self._wall - CREATE_SLACK_S:
                used += cpu  # born since the last call: all its CPU time is in this window
        percent = 0.0
        if self._at is not None and now > self._at:
            percent = round(100.0 * used / (now - self._at), 1)
        self._cpu, self._at, self._wall = seen, now, wall
        return percent, rss


class NvmlGpus:
    """Utilisation and memory in use of the GPUs ``gpus`` (``[{"index", "uuid"}]``, as assigned).

    :attr:`ok` is False where NVML cannot be loaded or does not know a GPU: then
    :meth:`read` answers nothing and the samples go without GPU figures (``gpu_source: none``).
    """

    def __init__(self, gpus: Sequence[dict[str, Any]]) -> None:
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self.ok = False
        if not gpus:
            return
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.info("NVML not available (%s): no GPU samples", exc)
            return
        self._nvml = pynvml
        try:
            for gpu in gpus:
                uuid = str(gpu.get("uuid") or "")
                try:
                    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode() if uuid else b"")
                except (pynvml.NVMLError, TypeError):
                    handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu["index"]))
                self._handles.append((int(gpu["index"]), handle))
        except pynvml.NVMLError as exc:
            log.info("NVML does not know the job's GPUs (%s): no GPU samples", exc)
            self.close()
            return
        self.ok = True

    def read(self) -> list[payloads.GpuSample]:
        """One figure pair per GPU: ``{"index", "gpu_util_percent", "gpu_memory_bytes"}``."""
        if not self.ok:
            return []
        nvml = self._nvml
        out: list[payloads.GpuSample] = []
        for index, handle in self._handles:
            try:
                util: int | None = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except nvml.NVMLError:
                util = None
            try:
                memory: int | None = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except nvml.NVMLError:
                memory = None
            out.append({"index": index, "gpu_util_percent": util, "gpu_memory_bytes": memory})
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None
        self.ok = False


class UsageSampler:
    """Samples one (job, attempt) from a thread of its own and posts the samples (module docstring).

    ``processes`` lists the job's processes now; ``gpus`` the GPUs it holds (``[{"index",
    "uuid"}]``); ``real_gpus`` False on a simulated node; ``elapsed_s`` the attempt's clock
    (seconds since the accept, surviving an agent restart) that numbers the samples.
    """

    def __init__(
        self,
        client: ApiClient,
        ref: JobRef,
        processes: Callable[[], Sequence[psutil.Process]],
        *,
        gpus: Sequence[dict[str, Any]],
        real_gpus: bool,
        abort: threading.Event,
        interval_s: float = INTERVAL_S,
        per_post: int = PER_POST,
        elapsed_s: Callable[[], float | None] | None = None,
    ) -> None:
        self.client = client
        self.ref = ref
        self.meter = ProcessTreeMeter(processes)
        self.gpu_list = list(gpus)
        self.real_gpus = real_gpus
        self.abort = abort
        self.interval_s = max(0.5, float(interval_s))
        self.per_post = max(1, min(per_post, SAMPLES_PER_POST_MAX))
        self._started = time.monotonic()
        self._elapsed = elapsed_s or (lambda: time.monotonic() - self._started)
        self.pending: deque[tuple[float, dict[str, Any]]] = deque(maxlen=PENDING_MAX)  # (monotonic, sample)
        self.stored = 0  # samples the server said it stored
        self.refused = False
        self._last_seq = 0
        self._stop = threading.Event()
        self._gpus: NvmlGpus | None = None
        self._thread = threading.Thread(target=self._loop, name=f"samples-{ref.job_id}-{ref.attempt}",
                                        daemon=True)

    @property
    def gpu_source(self) -> HealthSource:
        """Where the GPU figures come from: ``nvml``, ``simulated`` (none sent) or ``none``."""
        if not self.gpu_list:
            return HealthSource.NONE
        if not self.real_gpus:
            return HealthSource.SIMULATED
        return HealthSource.NVML if self._gpus is not None and self._gpus.ok else HealthSource.NONE

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout_s: float = 5.0) -> bool:
        """Stop sampling and post what is left (one try); False if still busy after ``timeout_s``."""
        self._stop.set()
        if self._thread.ident is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def take(self) -> dict[str, Any] | None:
        """Measure now and queue the sample; returns it (``ago_s`` is set when posted), or None when
        no process of the job could be read (its tree has just ended): no sample of zeros is sent."""
        cpu, rss = self.meter.measure()
        if rss == 0:
            return None
        elapsed = self._elapsed()
        seq = int(round((elapsed if elapsed is not None else time.monotonic() - self._started) * 1000))
        seq = self._last_seq = max(seq, self._last_seq + 1)
        sample: dict[str, Any] = {"seq": seq, "cpu_percent": cpu, "rss_bytes": rss}
        if self.real_gpus and self._gpus is not None and self._gpus.ok:
            sample["gpus"] = self._gpus.read()
        self.pending.append((time.monotonic(), sample))
        return sample

    def post(self) -> None:
        """Post the pending samples (one try). Raises like :meth:`ApiClient.samples_post`."""
        while self.pending and not self.refused:
            batch = list(self.pending)[:SAMPLES_PER_POST_MAX]
            now = time.monotonic()
            body = [{**sample, "ago_s": round(max(0.0, now - taken), 3)} for taken, sample in batch]
            self.stored += self.client.samples_post(self.ref.job_id, self.ref.attempt, body,  # type: ignore[arg-type]
                                                    gpu_source=self.gpu_source, abort=self.abort)
            for _ in batch:
                self.pending.popleft()

    def _loop(self) -> None:
        if self.real_gpus and self.gpu_list:
            self._gpus = NvmlGpus(self.gpu_list)
        try:
            self.meter.measure()  # the CPU baseline
            taken = 0
            while not self.abort.is_set():
                # the first sample after FIRST_S at most, so a short run gets one too
                if self._stop.wait(min(FIRST_S, self.interval_s) if taken == 0 else self.interval_s):
                    break
                self.take()
                taken += 1
                if taken % self.per_post == 0:
                    self._send()
                if self.refused:
                    return
            if not self.abort.is_set():
                self._send()
        finally:
            if self._gpus is not None:
                self._gpus.close()

    def _send(self) -> None:
        try:
            self.post()
        except (Aborted, httpx.TransportError) as exc:
            log.debug("%s: samples not sent now (%s)", self.ref, exc)
        except ApiError as exc:
            if exc.status >= 500 or exc.status == 429:
                log.debug("%s: samples not taken now (%s)", self.ref, exc)
                return
            # stale attempt, or a server without the call (404): the charts stop, the run goes on
            log.info("%s: samples refused (%s); sampling stops", self.ref, exc)
            self.refused = True
            self.pending.clear()
