"""The floor under the local-mode upload figure of ``bundle_throughput.py`` (issue 15): how fast one
HTTP stream carries 32 MiB chunk bodies on this machine when the server does nothing with them.

A bare ASGI app (reads the body, answers 200) under the same uvicorn the web process runs
(``devstack.web_command``'s server, httptools and uvloop), and the agent's HTTP client (httpx),
one chunk after another on one connection, as the agent's uploader sends them. Baseline in the
same run: a plain copy of the same bytes (``shutil.copyfile`` of a file of the chunks, median of
three), the baseline the upload goal is stated against (>= 0.20 of it). The ratio printed is the
best the upload path could reach with the web tier in the byte path, before any hashing, writing
or database work.

    .venv/bin/python benchmarks/http_floor.py [--chunks 16] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from devstack import free_port  # noqa: E402

CHUNK = 32 * 1024 * 1024  # bytes: the agent's chunk (apps/artifacts/services.CHUNK_MAX_BYTES)
APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(parts)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})
'''


def copy_mb_s(data: bytes, chunks: int, workdir: Path) -> float:
    """MB/s (10^6 bytes/s) of ``shutil.copyfile`` of a file of ``chunks`` copies of ``data``, median of 3."""
    src, dst = workdir / "src", workdir / "dst"
    with open(src, "wb") as fh:
        for _ in range(chunks):
            fh.write(data)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        shutil.copyfile(src, dst)
        times.append(time.perf_counter() - t)
        dst.unlink()
    src.unlink()
    return len(data) * chunks / statistics.median(times) / 1e6


def http_mb_s(data: bytes, chunks: int, workdir: Path) -> float:
    """MB/s of ``chunks`` sequential PUTs of ``data`` to a bare ASGI app under uvicorn, one connection."""
    (workdir / "floor_app.py").write_text(APP)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port),
                               "--log-level", "warning", "--no-access-log"], cwd=workdir)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(100):
                try:
                    client.get("/")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            client.put("/", content=data)  # warm
            t = time.perf_counter()
            for _ in range(chunks):
                assert client.put("/", content=data).text == str(len(data))
            return len(data) * chunks / (time.perf_counter() - t) / 1e6
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=16, help="32 MiB chunks per measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = os.urandom(CHUNK)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        copy = copy_mb_s(data, args.chunks, workdir)
        http = http_mb_s(data, args.chunks, workdir)
    figures = {"http_mb_s": round(http, 1), "copy_mb_s": round(copy, 1), "ratio": round(http / copy, 3),
               "load_1min": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"one HTTP stream, bare ASGI app: {figures['http_mb_s']} MB/s vs plain copy {figures['copy_mb_s']} MB/s: "
          f"ratio {figures['ratio']} (the ceiling of the local-mode upload ratio; goal there >= 0.20)")
    print(f"load average (1 min) at the end: {figures['load_1min']}")


if __name__ == "__main__":
    main()
