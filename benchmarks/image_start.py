"""Submit-to-running of a container-image job against a plain job, in the same run (issue 23;
goal: an image job whose image the node holds starts within 1.5x of a plain job), and the pull
time of a first run.

A registry on this machine (Debian's ``docker-registry``, no login) serves a busybox image built
here with ``buildah`` (:mod:`devstack.registry`); one agent (podman with runc) runs the jobs. Both
ends are the server's stamps (``run_started_at - submitted_at``; "running" is the agent's word that
the runtime's process started, so a container's own set-up falls after it: the script prints
``run_ended_at - submitted_at`` of the command ``true`` too, which holds it). The first image job pulls the
image after its rent (the pool is idle, so it never waits queued to pre-pull); the next ones find
it held. Plain and cached image jobs alternate, so both see the same machine.

    .venv/bin/python benchmarks/image_start.py [--jobs 10] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import httpx
from _stack import ROOT, live_stack
from start_latency import _seconds, _wait_released

sys.path.insert(0, str(ROOT))
from devstack.registry import push_busybox_image, serve_registry  # noqa: E402


def _spec(name: str, image: str | None) -> dict:
    work = {"command": "true", **({"image": image} if image else {})}
    return {"name": name, "work": work, "compute": {"gpus": 1, "time_limit": "5m"}}


def _start_s(client: httpx.Client, name: str, image: str | None) -> tuple[float, float]:
    """Submit-to-running and submit-to-command-end (s, server stamps) of one ``true`` job."""
    answer = client.post("/api/v1/jobs/", json=_spec(name, image))
    answer.raise_for_status()
    job = _wait_released(client, [answer.json()["id"]], timeout=120)[0]
    if job["outcome"] != "succeeded":
        raise RuntimeError(f"{name}: {job['outcome']}: {job['status_message']}")
    ended = datetime.fromisoformat(job["run_ended_at"]) - datetime.fromisoformat(job["submitted_at"])
    return _seconds(job), ended.total_seconds()


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10, help="plain and cached-image jobs each")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="e31-registry-") as tmp, serve_registry(Path(tmp)) as address:
        image = f"{address}/bench/busy:1"
        push_busybox_image(Path(tmp), image)
        try:
            insecure = {"E31_INSECURE_REGISTRIES": address}
            with live_stack([("bench-node", "1xH100-80GB")], env=insecure) as (stack, token):
                client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=30)
                _start_s(client, "warm-up", None)
                first, _ = _start_s(client, "first-image", image)
                plain, cached = [], []
                for i in range(args.jobs):
                    plain.append(_start_s(client, f"plain-{i}", None))
                    cached.append(_start_s(client, f"image-{i}", image))
        finally:
            subprocess.run(["podman", "rmi", "-f", image], capture_output=True, timeout=60)
    plain_median, cached_median = (statistics.median(s for s, _ in runs) for runs in (plain, cached))
    plain_end, cached_end = (statistics.median(e for _, e in runs) for runs in (plain, cached))
    result = {
        "benchmark": "image_start", "jobs": args.jobs,
        "plain_median_s": round(plain_median, 3), "image_cached_median_s": round(cached_median, 3),
        "ratio_image_cached_to_plain": round(cached_median / plain_median, 2), "goal_ratio": 1.5,
        "plain_end_median_s": round(plain_end, 3), "image_cached_end_median_s": round(cached_end, 3),
        "ratio_end": round(cached_end / plain_end, 2),
        "image_first_run_s": round(first, 3), "first_run_pull_s": round(first - cached_median, 3),
    }
    print(json.dumps(result) if args.json else
          f"submit-to-running, {args.jobs} jobs each: plain median {result['plain_median_s']} s, image held "
          f"on the node median {result['image_cached_median_s']} s = {result['ratio_image_cached_to_plain']}x "
          f"(goal <= 1.5x); submit to the end of `true`: {result['plain_end_median_s']} s against "
          f"{result['image_cached_end_median_s']} s = {result['ratio_end']}x (the container's set-up); first "
          f"image run {result['image_first_run_s']} s to running, of which the pull about "
          f"{result['first_run_pull_s']} s")
    return result


if __name__ == "__main__":
    main()
