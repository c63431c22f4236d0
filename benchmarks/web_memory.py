"""Memory of the web process under large bodies (issue 11, item 4).

Starts the production shape (``devstack/``: one uvicorn web process,
a worker, one agent) on a fresh database, then measures the web process's
resident memory (RSS, psutil, sampled every 20 ms) against its resting RSS:

1. a 1 GiB upload (``POST /api/v1/uploads/``, multipart, signed in): goal +64 MiB;
2. two concurrent downloads of a 1 GB bundle (``GET /api/v1/jobs/<id>/bundle/``): goal +64 MiB;
3. an anonymous 256 MiB multipart body to ``/api/v1/uploads/`` and ``/accounts/login/``:
   refused (401/403) with the server within +16 MiB.

Run: ``.venv/bin/python benchmarks/web_memory.py`` (``BENCH_DATABASE_URL``,
``BENCH_REDIS_URL`` as in ``benchmarks/_stack.py``). The machine may be shared:
RSS is the process's own, but timings are not figures of merit here.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stack import live_stack, manage  # noqa: E402

MiB = 1024 * 1024
UPLOAD = 1024 * MiB
BUNDLE = 1_000_000_000
ANON = 256 * MiB


class Peak(threading.Thread):
    """Samples a process's RSS until stopped; ``peak`` is the largest seen (bytes)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self) -> Peak:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def resting(pid: int) -> int:
    samples = []
    for _ in range(25):
        samples.append(psutil.Process(pid).memory_info().rss)
        time.sleep(0.04)
    return max(samples)


class Zeros:
    """A file-like body of ``size`` zero bytes, read in blocks (nothing held in the client)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def multipart(size: int, boundary: str = "e31benchboundary"):
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def body():
        yield head
        left = size
        block = bytes(4 * MiB)
        while left:
            n = min(left, len(block))
            yield block[:n]
            left -= n
        yield tail

    return body(), len(head) + size + len(tail), f"multipart/form-data; boundary={boundary}"


def make_bundle(var_dir: Path) -> int:
    """A released-looking job of user ``bench`` whose rank-0 bundle is a 1 GB file; returns its id."""
    media = var_dir / "media" / "bench"
    media.mkdir(parents=True, exist_ok=True)
    path = media / "bundle.tar.gz"
    with open(path, "wb") as fh:
        fh.truncate(BUNDLE)  # sparse: served as zeros, read fast
    code = (
        "from django.contrib.auth.models import User; from django.utils import timezone; "
        "from apps.jobs.services.cancel import job_cancel; from apps.jobs.services.submit import job_submit; "
        "from apps.artifacts.models import Bundle; "
        "u = User.objects.get(username='bench'); "
        "j = job_submit(owner=u, document={'name': 'mem', 'work': {'command': 'true'}, "
        "'compute': {'gpus': 1, 'time_limit': '1m'}, 'output': {'paths': ['out/**']}}); "
        "j = job_cancel(job=j); "
        "Bundle.objects.create(job=j, attempt=max(j.attempt, 1), rank=0, file='bench/bundle.tar.gz', "
        f"received_bytes={BUNDLE}, size_bytes={BUNDLE}, sha256='0'*64, completed_at=timezone.now()); "
        "type(j).objects.filter(pk=j.pk).update(attempt=max(j.attempt, 1)); print(j.pk)"
    )
    old = os.environ.get("E31_VAR_DIR")
    os.environ["E31_VAR_DIR"] = str(var_dir)
    try:
        return int(manage("shell", "-c", code).splitlines()[-1])
    finally:
        if old is None:
            os.environ.pop("E31_VAR_DIR", None)
        else:
            os.environ["E31_VAR_DIR"] = old


def main() -> None:
    with live_stack(agents=[("node-a", "1xH100-80GB")]) as (stack, token):
        pid = stack.named["web0"].pid
        auth = {"Authorization": f"Token {token}"}
        with httpx.Client(base_url=stack.url, timeout=600) as c:
            for _ in range(5):
                c.get("/api/v1/jobs/", headers=auth)
        rows = []

        base = resting(pid)
        with Peak(pid) as peak:
            body, length, ctype = multipart(UPLOAD)
            t0 = time.monotonic()
            r = httpx.post(stack.url + "/api/v1/uploads/", content=body, timeout=1200,
                           headers={**auth, "Content-Type": ctype, "Content-Length": str(length)})
            took = time.monotonic() - t0
        assert r.status_code == 201, (r.status_code, r.text[:300])
        rows.append(("1 GiB upload", r.status_code, base, peak.peak, 64, f"{UPLOAD / MiB / took:.0f} MiB/s"))

        job_id = make_bundle(stack.var_dir)
        base = resting(pid)

        def download() -> int:
            got = 0
            with httpx.stream("GET", f"{stack.url}/api/v1/jobs/{job_id}/bundle/", headers=auth, timeout=1200) as s:
                assert s.status_code == 200, s.status_code
                for chunk in s.iter_bytes(1 << 20):
                    got += len(chunk)
            return got

        with Peak(pid) as peak, ThreadPoolExecutor(2) as pool:
            t0 = time.monotonic()
            sizes = list(pool.map(lambda _: download(), range(2)))
            took = time.monotonic() - t0
        assert sizes == [BUNDLE, BUNDLE], sizes
        rows.append(("2 x 1 GB bundle downloads", 200, base, peak.peak, 64,
                     f"{2 * BUNDLE / MiB / took:.0f} MiB/s together"))

        for path in ("/api/v1/uploads/", "/accounts/login/"):
            base = resting(pid)
            with Peak(pid) as peak:
                body, length, ctype = multipart(ANON)
                try:
                    r = httpx.post(stack.url + path, content=body, timeout=120,
                                   headers={"Content-Type": ctype, "Content-Length": str(length)})
                    status = r.status_code
                except httpx.HTTPError as exc:  # the server answered and closed before the body was sent
                    status = f"closed ({type(exc).__name__})"
                time.sleep(0.5)
            rows.append((f"anonymous 256 MiB to {path}", status, base, peak.peak, 16, ""))

    print(f"{'case':40} {'status':>8} {'rest MiB':>9} {'peak MiB':>9} {'+MiB':>7} {'goal':>6}  ok  note")
    for name, status, rest, top, goal, note in rows:
        grew = (top - rest) / MiB
        print(f"{name:40} {status!s:>8} {rest / MiB:9.1f} {top / MiB:9.1f} {grew:+7.1f} {'+' + str(goal):>6}  "
              f"{'yes' if grew <= goal else 'NO '}  {note}")


if __name__ == "__main__":
    main()
