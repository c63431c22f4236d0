"""Upload and download throughput of a 1 GB output bundle through the real server, against a plain
file copy on the same machine in the same run (issue 4).

Upload: the agent's own code (``e31_agent.uploader.upload_bundle``: verified 8 MiB chunks, then
``complete``, where the server joins the parts and checks the whole archive and every file of the
manifest) against a uvicorn web process of ``devstack/``, the node played by this script
with a real node token. Download: ``GET /api/v1/jobs/<id>/bundle/`` as the job's owner, once whole
and once in 64 MiB ``Range`` requests. Baseline: ``shutil.copyfile`` of the same archive (median of
three), and a sha256 over it (the least the server must do). Figures in MB/s (10^6 bytes per second).

    .venv/bin/python benchmarks/bundle_throughput.py [--size-mb 1000] [--json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _stack import ROOT, live_stack, manage, percentile

sys.path.insert(0, str(ROOT / "agent"))

from e31_agent.client import ApiClient  # noqa: E402
from e31_agent.models import GpuInfo, Inventory  # noqa: E402
from e31_agent.packer import pack  # noqa: E402
from e31_agent.uploader import upload_bundle  # noqa: E402

RANGE_BYTES = 64 * 1024 * 1024


def _mbps(size: int, seconds: float) -> float:
    return round(size / seconds / 1e6, 1)


def _job_in_output(stack, token: str, node_token: str) -> tuple[ApiClient, int]:
    """Register the benchmark's node, submit a one-GPU job, and report it to the output step."""
    agent = ApiClient(stack.url, node_token, timeout_s=600)
    agent.register(Inventory(hostname="bench-host", agent_version="bench", cpus=8, memory_bytes=64 * 10**9,
                             disk_bytes=10**12, runtimes=[], simulated=True,
                             gpus=[GpuInfo(index=0, uuid="GPU-bench-0", model="H100-80GB", memory_mb=81920)]))
    user = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=60)
    job_id = user.post("/api/v1/jobs/", json={"name": "bundle-bench", "work": {"command": "true"},
                                              "compute": {"gpus": 1, "time_limit": "1h"},
                                              "output": {"paths": ["**"]}}).json()["id"]
    deadline = time.monotonic() + 30
    while not (work := agent.work(1)).assignments and time.monotonic() < deadline:
        pass
    [assignment] = work.assignments
    for seq, (kind, extra) in enumerate([("accepted", {}), ("running", {"pid": 1}),
                                          ("exited", {"exit_code": 0, "reason": "exit"})], 1):
        agent.report(job_id, {"attempt": assignment.attempt, "seq": seq, "type": kind, **extra})
    return agent, job_id


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1000, help="size of the job's output file, MB (10^6 bytes)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="e31-bundle-bench-") as tmp:
        work = Path(tmp)
        job_dir = work / "job"
        job_dir.mkdir()
        with open(job_dir / "weights.bin", "wb") as fh:  # incompressible, like model weights
            for _ in range(args.size_mb):
                fh.write(os.urandom(1_000_000))
        t = time.perf_counter()
        bundle = pack(job_dir, ["**"], work / "bundle.tar.gz", job_id=1)
        pack_s = time.perf_counter() - t
        size = bundle.size_bytes

        copies = []
        for _ in range(3):  # the median of three: the page cache and write-back make one copy noisy
            t = time.perf_counter()
            shutil.copyfile(bundle.path, work / "copy.tar.gz")
            copies.append(time.perf_counter() - t)
            (work / "copy.tar.gz").unlink()
        copy_s = statistics.median(copies)
        t = time.perf_counter()
        with open(bundle.path, "rb") as fh:
            hashlib.file_digest(fh, "sha256")
        sha_s = time.perf_counter() - t

        with live_stack([]) as (stack, token):
            node_token = manage("issue_node_token", "bench-node")
            agent, job_id = _job_in_output(stack, token, node_token)
            complete = agent.bundle_complete
            timings: dict[str, float] = {}

            def timed_complete(*a, **kw):
                started = time.perf_counter()
                try:
                    return complete(*a, **kw)
                finally:
                    timings["complete_s"] = time.perf_counter() - started

            agent.bundle_complete = timed_complete  # the server's join and verification, timed apart
            put = agent.bundle_put
            put_s: list[float] = []

            def timed_put(*a, **kw):
                started = time.perf_counter()
                try:
                    return put(*a, **kw)
                finally:
                    put_s.append(time.perf_counter() - started)

            agent.bundle_put = timed_put
            t = time.perf_counter()
            upload_bundle(agent, job_id, 1, bundle)
            upload_s = time.perf_counter() - t
            agent.close()
            user = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=600)
            url = f"/api/v1/jobs/{job_id}/bundle/"
            digest = hashlib.sha256()
            t = time.perf_counter()
            with user.stream("GET", url) as resp:
                for chunk in resp.iter_bytes(1 << 20):
                    digest.update(chunk)
            download_s = time.perf_counter() - t
            assert digest.hexdigest() == bundle.sha256, "downloaded bundle differs"
            t = time.perf_counter()
            got = 0
            while got < size:
                resp = user.get(url, headers={"Range": f"bytes={got}-{got + RANGE_BYTES - 1}"})
                assert resp.status_code == 206, resp.status_code
                got += len(resp.content)
            ranged_s = time.perf_counter() - t
    result = {
        "benchmark": "bundle_throughput", "bundle_bytes": size,
        "upload_mb_per_s": _mbps(size, upload_s), "download_mb_per_s": _mbps(size, download_s),
        "download_range_64mib_mb_per_s": _mbps(size, ranged_s),
        "baseline_copy_mb_per_s": _mbps(size, copy_s), "baseline_sha256_mb_per_s": _mbps(size, sha_s),
        "pack_mb_per_s": _mbps(size, pack_s),
        "upload_seconds": round(upload_s, 2), "of_which_complete_seconds": round(timings["complete_s"], 2),
        "chunk_put_ms_median": round(statistics.median(put_s) * 1000, 1),
        "chunk_put_ms_p95": round(percentile(put_s, 95) * 1000, 1),
        "chunk_put_ms_first_tenth": round(statistics.mean(put_s[: max(1, len(put_s) // 10)]) * 1000, 1),
        "chunk_put_ms_last_tenth": round(statistics.mean(put_s[-max(1, len(put_s) // 10):]) * 1000, 1),
        "upload_ratio_to_copy": round(copy_s / upload_s, 3), "download_ratio_to_copy": round(copy_s / download_s, 3),
    }
    print(json.dumps(result) if args.json else
          f"bundle of {size / 1e6:.0f} MB: upload {result['upload_mb_per_s']} MB/s (chunks + server verification), "
          f"download {result['download_mb_per_s']} MB/s whole, {result['download_range_64mib_mb_per_s']} MB/s "
          f"in 64 MiB ranges; plain copy {result['baseline_copy_mb_per_s']} MB/s, sha256 "
          f"{result['baseline_sha256_mb_per_s']} MB/s (ratios to copy: upload {result['upload_ratio_to_copy']}, "
          f"of its {upload_s:.1f} s {timings['complete_s']:.1f} s in complete, 8 MiB chunk PUT median "
          f"{result['chunk_put_ms_median']} ms, p95 {result['chunk_put_ms_p95']} ms; "
          f"download {result['download_ratio_to_copy']}); packing {result['pack_mb_per_s']} MB/s")
    return result


if __name__ == "__main__":
    main()
