"""Packing, upload and download throughput of a 1 GB output bundle, against baselines measured in
the same run on the same bytes (issue 4, issue 15 item 2 and local mode of "Done when").

Two bundles, reported apart: one file of random bytes (incompressible, like weights or video) and one
of text (log-like lines, compressible). For each:

* **packing**: the agent's packer (``e31_agent.packer.pack``: uncompressed pax tar, the sha256 of each
  file and of the archive, each byte read once) against one sha256 over the same archive
  (``hashlib.file_digest``); goal >= 0.5 of it (issue 15). Median of three, interleaved.
* **upload**: the agent's own uploader (``e31_agent.uploader.upload_bundle``: verified chunks, then
  ``complete``, where the server checks the whole archive and every file of the manifest) against a
  uvicorn web process of ``devstack/`` with local storage, the node played by this script
  with a real node token; against a plain copy of the archive (``shutil.copyfile``, median of three);
  goal >= 0.20 of it (issue 15).
* **download**: ``GET /api/v1/jobs/<id>/bundle/`` as the job's owner with a plain HTTP client
  (``http.client``, 4 MiB reads into a file, as ``curl -o`` does), once whole and once in 64 MiB
  ``Range`` requests; the file's sha256 is checked after the clock stops.

With ``--storage s3`` (issue 15 item 1) the site keeps files in an S3-compatible store
(``E31_STORAGE_URL=s3://...``; ``--s3-endpoint URL``, or a ``moto_server`` started here): the upload
is the agent's direct path (parts PUT straight to the store with URLs the site signs, then
``complete``, then the wait until the side worker has verified the archive from the store and kept
it), the download follows the site's 302 to a signed URL of the store. Baselines, same file, same
store, same run: boto3's own ``upload_file`` and ``download_file`` (its managed, multi-threaded
transfer); goal >= 0.80 of them. Packing is not repeated there (``--kinds random`` by default).

Also printed for context: a write of the same bytes from user space (``os.read``/``os.write``, 4 MiB
buffers; the copy runs in the kernel, ``copy_file_range``), and what gzip level 1 (the old format)
would have made of the first 64 MB. Figures in MB/s (10^6 bytes per second).

    .venv/bin/python benchmarks/bundle_throughput.py [--size-mb 1000] [--json]
    .venv/bin/python benchmarks/bundle_throughput.py --storage s3 [--s3-endpoint URL] [--size-mb 1000]
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from urllib.parse import urlparse

import httpx
from _stack import ROOT, live_stack, manage, percentile

sys.path.insert(0, str(ROOT / "agent"))

from e31_agent.client import ApiClient  # noqa: E402
from e31_agent.models import GpuInfo, Inventory  # noqa: E402
from e31_agent.packer import pack  # noqa: E402
from e31_agent.uploader import CHUNK_BYTES, upload_bundle  # noqa: E402

RANGE_BYTES = 64 * 1024 * 1024
READ_BYTES = 4 * 1024 * 1024
KINDS = ("random", "text")


def _mbps(size: int, seconds: float) -> float:
    return round(size / seconds / 1e6, 1)


def _make_output(job_dir: Path, kind: str, size_mb: int) -> None:
    """``size_mb`` MB of random bytes (``weights.bin``) or of log-like text (``train.log``)."""
    job_dir.mkdir(parents=True)
    if kind == "random":
        with open(job_dir / "weights.bin", "wb") as fh:
            for _ in range(size_mb):
                fh.write(os.urandom(1_000_000))
        return
    rng = random.Random(15)
    lines = [f"2026-12-01T19:{rng.randrange(60):02d}:{rng.randrange(60):02d} step {i} loss {rng.random():.6f} "
             f"lr {rng.random() / 1000:.3e} grad_norm {rng.random() * 10:.4f} tokens/s {rng.randrange(10**6)}\n"
             for i in range(40_000)]
    block = "".join(lines).encode()  # about 4 MB; repeated (gzip's 32 KiB window never sees the repeat)
    left = size_mb * 1_000_000
    with open(job_dir / "train.log", "wb") as fh:
        while left > 0:
            fh.write(block[:left])
            left -= len(block)


def _user_space_write(src: Path, dst: Path) -> None:
    buf = bytearray(READ_BYTES)
    view = memoryview(buf)
    fin = os.open(src, os.O_RDONLY)
    fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while n := os.readv(fin, [buf]):
            out = view[:n]
            while out:
                out = out[os.write(fout, out):]
    finally:
        os.close(fin)
        os.close(fout)


def _local(work: Path, kind: str, size_mb: int) -> dict:
    """Pack the bundle of ``kind``; packing, sha256, copy and user-space write, each the median of three."""
    job_dir = work / f"job-{kind}"
    _make_output(job_dir, kind, size_mb)
    times: dict[str, list[float]] = {"pack": [], "sha256": [], "copy": [], "write": []}
    bundle = None
    for _ in range(3):  # interleaved: the page cache and write-back make one run noisy
        t = time.perf_counter()
        bundle = pack(job_dir, ["**"], work / f"bundle-{kind}.tar", job_id=1)
        times["pack"].append(time.perf_counter() - t)
        t = time.perf_counter()
        with open(bundle.path, "rb") as fh:
            hashlib.file_digest(fh, "sha256")
        times["sha256"].append(time.perf_counter() - t)
        t = time.perf_counter()
        shutil.copyfile(bundle.path, work / "copy")
        times["copy"].append(time.perf_counter() - t)
        (work / "copy").unlink()
        t = time.perf_counter()
        _user_space_write(bundle.path, work / "copy")
        times["write"].append(time.perf_counter() - t)
        (work / "copy").unlink()
    assert bundle is not None
    shutil.rmtree(job_dir)
    with open(bundle.path, "rb") as fh:
        sample = fh.read(64_000_000)
    gz = zlib.compressobj(1, zlib.DEFLATED, 31)
    gz_bytes = len(gz.compress(sample)) + len(gz.flush())
    med = {k: statistics.median(v) for k, v in times.items()}
    size = bundle.size_bytes
    return {"bundle": bundle, "size": size, "seconds": med,
            "pack_mb_per_s": _mbps(size, med["pack"]), "sha256_mb_per_s": _mbps(size, med["sha256"]),
            "copy_mb_per_s": _mbps(size, med["copy"]), "user_space_write_mb_per_s": _mbps(size, med["write"]),
            "pack_ratio_to_sha256": round(med["sha256"] / med["pack"], 3),
            "pack_mb_per_s_all": [_mbps(size, s) for s in times["pack"]],
            "gzip1_size_ratio_first_64mb": round(gz_bytes / len(sample), 3)}


def _node(stack, node_token: str) -> ApiClient:
    agent = ApiClient(stack.url, node_token, timeout_s=600)
    agent.register(Inventory(hostname="bench-host", agent_version="bench", cpus=8, memory_bytes=64 * 10**9,
                             disk_bytes=10**12, runtimes=[], simulated=True,
                             gpus=[GpuInfo(index=i, uuid=f"GPU-bench-{i}", model="H100-80GB", memory_mb=81920)
                                   for i in range(len(KINDS))]))
    return agent


def _job_in_output(stack, agent: ApiClient, token: str) -> int:
    """Submit a one-GPU job and report it to the output step; its id."""
    user = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=60)
    job_id = user.post("/api/v1/jobs/", json={"name": "bundle-bench", "work": {"command": "true"},
                                              "compute": {"gpus": 1, "time_limit": "1h"},
                                              "output": {"paths": ["**"]}}).json()["id"]
    deadline = time.monotonic() + 30
    mine: list = []
    while not mine and time.monotonic() < deadline:
        mine = [a for a in agent.work(1).assignments if a.job_id == job_id]
    [assignment] = mine
    for seq, (kind, extra) in enumerate([("accepted", {}), ("running", {"pid": 1}),
                                          ("exited", {"exit_code": 0, "reason": "exit"})], 1):
        agent.report(job_id, {"attempt": assignment.attempt, "seq": seq, "type": kind, **extra})
    return job_id


def _upload(agent: ApiClient, job_id: int, bundle) -> dict:
    """Upload with the agent's uploader; total seconds, ``complete`` seconds, and each chunk PUT's."""
    timings: dict[str, float] = {}
    put_s: list[float] = []
    complete, put = agent.bundle_complete, agent.bundle_put

    def timed_complete(*a, **kw):
        started = time.perf_counter()
        try:
            return complete(*a, **kw)
        finally:
            timings["complete_s"] = time.perf_counter() - started

    def timed_put(*a, **kw):
        started = time.perf_counter()
        try:
            return put(*a, **kw)
        finally:
            put_s.append(time.perf_counter() - started)

    agent.bundle_complete, agent.bundle_put = timed_complete, timed_put  # the server's part, timed apart
    t = time.perf_counter()
    upload_bundle(agent, job_id, 1, bundle)
    seconds = time.perf_counter() - t
    agent.bundle_complete, agent.bundle_put = complete, put
    return {"seconds": seconds, "complete_s": timings["complete_s"], "put_s": put_s}


def _get(conn: http.client.HTTPConnection, url: str, token: str, out, headers: dict | None = None) -> int:
    """One GET into ``out`` in 4 MiB reads; the status. No ``Authorization`` without ``token`` (a
    signed URL of the store carries its own)."""
    conn.request("GET", url, headers={**({"Authorization": f"Token {token}"} if token else {}), **(headers or {})})
    resp = conn.getresponse()
    buf = bytearray(READ_BYTES)
    view = memoryview(buf)
    while n := resp.readinto(buf):
        out.write(view[:n])
    return resp.status


def _download(stack, token: str, job_id: int, bundle, work: Path) -> dict:
    url = urlparse(stack.url)
    path = f"/api/v1/jobs/{job_id}/bundle/"
    target = work / "download"
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    t = time.perf_counter()
    with open(target, "wb", buffering=0) as out:
        assert _get(conn, path, token, out) == 200
    whole_s = time.perf_counter() - t
    with open(target, "rb") as fh:
        assert hashlib.file_digest(fh, "sha256").hexdigest() == bundle.sha256, "downloaded bundle differs"
    target.unlink()
    conn.close()  # idle past uvicorn's keep-alive (5 s) while the file was checked: a new connection
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    t = time.perf_counter()
    with open(target, "wb", buffering=0) as out:
        got = 0
        while got < bundle.size_bytes:
            assert _get(conn, path, token, out, {"Range": f"bytes={got}-{got + RANGE_BYTES - 1}"}) == 206
            got = out.tell()
    ranged_s = time.perf_counter() - t
    with open(target, "rb") as fh:
        assert hashlib.file_digest(fh, "sha256").hexdigest() == bundle.sha256, "ranged download differs"
    target.unlink()
    conn.close()
    return {"whole_s": whole_s, "ranged_s": ranged_s}


@contextlib.contextmanager
def _s3_store(endpoint: str | None):
    """(endpoint, bucket, boto3 client) of a fresh bucket: on ``endpoint``, or on a ``moto_server``
    started here for the run."""
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "e31-bench", "AWS_SECRET_ACCESS_KEY": "e31-bench-secret",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    proc = None
    if not endpoint:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p",
                                 str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(endpoint + "/moto-api/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        bucket = f"e31-bench-{os.getpid()}"
        client.create_bucket(Bucket=bucket)
        yield endpoint, bucket, client
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def _download_s3(stack, token: str, job_id: int, bundle, work: Path) -> dict:
    """The bundle through the site's 302 to a signed URL of the store: whole, then in 64 MiB ranges
    of that URL (one redirect, as a download manager reuses it)."""
    site = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=600)
    target = work / "download"
    out = {}
    for how in ("whole", "ranged"):
        t = time.perf_counter()
        resp = site.get(f"/api/v1/jobs/{job_id}/bundle/")
        assert resp.status_code == 302, resp.status_code
        location = urlparse(resp.headers["Location"])
        conn = http.client.HTTPConnection(location.hostname, location.port, timeout=600)
        path = location.path + "?" + location.query
        with open(target, "wb", buffering=0) as fh:
            if how == "whole":
                assert _get(conn, path, "", fh) == 200
            else:
                got = 0
                while got < bundle.size_bytes:
                    assert _get(conn, path, "", fh, {"Range": f"bytes={got}-{got + RANGE_BYTES - 1}"}) == 206
                    got = fh.tell()
        out[f"{how}_s"] = time.perf_counter() - t
        conn.close()
        with open(target, "rb") as fh:
            assert hashlib.file_digest(fh, "sha256").hexdigest() == bundle.sha256, f"{how} download differs"
        target.unlink()
    site.close()
    return out


def _boto3_baseline(client, bucket: str, bundle, work: Path) -> dict:
    """boto3's managed transfer of the same file to and from the same store (its defaults: 8 MB
    parts, 10 threads)."""
    t = time.perf_counter()
    client.upload_file(str(bundle.path), bucket, "baseline/bundle.tar")
    up = time.perf_counter() - t
    t = time.perf_counter()
    client.download_file(bucket, "baseline/bundle.tar", str(work / "baseline"))
    down = time.perf_counter() - t
    (work / "baseline").unlink()
    client.delete_object(Bucket=bucket, Key="baseline/bundle.tar")
    return {"upload_s": up, "download_s": down}


def main_s3(args) -> dict:
    """The ``--storage s3`` run: see the module."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="e31-bundle-bench-") as tmp, _s3_store(args.s3_endpoint) as (
            endpoint, bucket, client):
        work = Path(tmp)
        bundles = {}
        for kind in args.kinds:
            job_dir = work / f"job-{kind}"
            _make_output(job_dir, kind, args.size_mb)
            bundles[kind] = pack(job_dir, ["**"], work / f"bundle-{kind}.tar", job_id=1)
            shutil.rmtree(job_dir)
        # every process of the stack (and manage.py here) reads it from the environment
        os.environ["E31_STORAGE_URL"] = f"s3://{bucket}?endpoint_url={endpoint}&region=us-east-1"
        with live_stack([]) as (stack, token):
            agent = _node(stack, manage("issue_node_token", "bench-node"))
            for kind, bundle in bundles.items():
                job_id = _job_in_output(stack, agent, token)
                base = _boto3_baseline(client, bucket, bundle, work)
                complete = agent.bundle_complete
                marks: dict[str, float] = {}

                def timed_complete(*a, _complete=complete, _marks=marks, **kw):
                    _marks["parts_sent"] = time.perf_counter()
                    return _complete(*a, **kw)

                agent.bundle_complete = timed_complete
                t = time.perf_counter()
                upload_bundle(agent, job_id, 1, bundle)
                up_s = time.perf_counter() - t
                agent.bundle_complete = complete
                down = _download_s3(stack, token, job_id, bundle, work)
                size = bundle.size_bytes
                results[kind] = {
                    "bundle_bytes": size, "storage": "s3",
                    "upload_mb_per_s": _mbps(size, up_s),
                    "upload_parts_only_mb_per_s": _mbps(size, marks["parts_sent"] - t),
                    "verify_and_keep_seconds": round(up_s - (marks["parts_sent"] - t), 2),
                    "boto3_upload_mb_per_s": _mbps(size, base["upload_s"]),
                    "download_mb_per_s": _mbps(size, down["whole_s"]),
                    "download_range_64mib_mb_per_s": _mbps(size, down["ranged_s"]),
                    "boto3_download_mb_per_s": _mbps(size, base["download_s"]),
                    "upload_ratio_to_boto3": round(base["upload_s"] / up_s, 3),
                    "upload_parts_only_ratio_to_boto3": round(base["upload_s"] / (marks["parts_sent"] - t), 3),
                    "download_ratio_to_boto3": round(base["download_s"] / down["whole_s"], 3),
                }
                bundle.path.unlink()
            agent.close()
    out = {"benchmark": "bundle_throughput", "storage": "s3", "load_average_1m": round(os.getloadavg()[0], 2),
           **results}
    if args.json:
        print(json.dumps(out))
        return out
    for kind, r in results.items():
        print(f"{kind} bundle, {r['bundle_bytes'] / 1e6:.0f} MB, S3-compatible store ({args.s3_endpoint or 'moto'}):\n"
              f"  upload   {r['upload_mb_per_s']:>7} MB/s (parts sent at {r['upload_parts_only_mb_per_s']} MB/s, "
              f"then {r['verify_and_keep_seconds']} s to join, verify from the store and keep) vs boto3 "
              f"upload_file {r['boto3_upload_mb_per_s']} MB/s: ratio {r['upload_ratio_to_boto3']} "
              f"(parts alone {r['upload_parts_only_ratio_to_boto3']}; goal >= 0.80)\n"
              f"  download {r['download_mb_per_s']:>7} MB/s vs boto3 download_file {r['boto3_download_mb_per_s']} "
              f"MB/s: ratio {r['download_ratio_to_boto3']}; in 64 MiB ranges {r['download_range_64mib_mb_per_s']} MB/s")
    print(f"load average (1 min) at the end: {out['load_average_1m']}")
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1000, help="size of each job's output file, MB (10^6 bytes)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--storage", choices=["local", "s3"], default="local")
    parser.add_argument("--s3-endpoint", default="", help="an S3-compatible server (default: moto_server, started)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=None)
    args = parser.parse_args()
    if args.storage == "s3":
        args.kinds = args.kinds or ["random"]
        return main_s3(args)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="e31-bundle-bench-") as tmp:
        work = Path(tmp)
        local = {kind: _local(work, kind, args.size_mb) for kind in KINDS}
        with live_stack([]) as (stack, token):
            agent = _node(stack, manage("issue_node_token", "bench-node"))
            for kind in KINDS:
                job_id = _job_in_output(stack, agent, token)
                got = local[kind]
                up = _upload(agent, job_id, got["bundle"])
                down = _download(stack, token, job_id, got["bundle"], work)
                size, copy_s = got["size"], got["seconds"]["copy"]
                puts = up["put_s"]
                results[kind] = {
                    "bundle_bytes": size, "files": len(got["bundle"].files),
                    **{k: v for k, v in got.items() if k not in ("bundle", "size", "seconds")},
                    "upload_mb_per_s": _mbps(size, up["seconds"]), "upload_seconds": round(up["seconds"], 2),
                    "of_which_complete_seconds": round(up["complete_s"], 2),
                    "chunk_bytes": CHUNK_BYTES, "chunks": len(puts),
                    "chunk_put_ms_median": round(statistics.median(puts) * 1000, 1),
                    "chunk_put_ms_p95": round(percentile(puts, 95) * 1000, 1),
                    "download_mb_per_s": _mbps(size, down["whole_s"]),
                    "download_range_64mib_mb_per_s": _mbps(size, down["ranged_s"]),
                    "upload_ratio_to_copy": round(copy_s / up["seconds"], 3),
                    "download_ratio_to_copy": round(copy_s / down["whole_s"], 3),
                }
                got["bundle"].path.unlink()
            agent.close()
    out = {"benchmark": "bundle_throughput", "load_average_1m": round(os.getloadavg()[0], 2), **results}
    if args.json:
        print(json.dumps(out))
        return out
    for kind, r in results.items():
        print(f"{kind} bundle, {r['bundle_bytes'] / 1e6:.0f} MB in {r['files']} file(s) "
              f"(gzip -1 would keep {r['gzip1_size_ratio_first_64mb']:.0%} of it):\n"
              f"  packing  {r['pack_mb_per_s']:>7} MB/s  vs one sha256 {r['sha256_mb_per_s']} MB/s: "
              f"ratio {r['pack_ratio_to_sha256']} (goal >= 0.5; the three runs {r['pack_mb_per_s_all']})\n"
              f"  upload   {r['upload_mb_per_s']:>7} MB/s  vs plain copy {r['copy_mb_per_s']} MB/s: "
              f"ratio {r['upload_ratio_to_copy']} (goal >= 0.20; {r['upload_seconds']} s, of which complete "
              f"{r['of_which_complete_seconds']} s; {r['chunks']} chunks of {r['chunk_bytes'] >> 20} MiB, PUT "
              f"median {r['chunk_put_ms_median']} ms, p95 {r['chunk_put_ms_p95']} ms)\n"
              f"  download {r['download_mb_per_s']:>7} MB/s  vs plain copy: ratio {r['download_ratio_to_copy']}; "
              f"in 64 MiB ranges {r['download_range_64mib_mb_per_s']} MB/s\n"
              f"  context: a user-space write of the same bytes {r['user_space_write_mb_per_s']} MB/s")
    print(f"load average (1 min) at the end: {out['load_average_1m']}")
    return out


if __name__ == "__main__":
    main()
