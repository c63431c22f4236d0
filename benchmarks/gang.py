"""A gang's network and start (issue 24; goal: at least 0.5 of a plain loopback TCP stream on
one host). A live stack with two 2-GPU agents on this host runs ``examples/multinode`` (each rank
sends ``--mib`` MiB to the other over ``gang0``: veth, the attempt's bridge, veth) ``--runs``
times; the baseline, in the same run, is the same exchange code between two processes over the
host's loopback. Then the extra start of a 2-node gang over a 1-node job: submit-to-running
(server stamps) of ``--jobs`` trivial jobs of each, one at a time on the idle pool.

    .venv/bin/python benchmarks/gang.py [--runs 3] [--mib 100] [--jobs 8] [--json]
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile

import httpx
from _stack import ROOT, live_stack, trivial_spec
from start_latency import _seconds, _wait_released

EXAMPLE = ROOT / "examples" / "multinode"
LOOPBACK = """
import json, sys
sys.path.insert(0, {folder!r})
from exchange import exchange
rank, mib = int(sys.argv[1]), int(sys.argv[2])
print(json.dumps(exchange(rank, 2, ("127.0.0.1", 47100 + 1 - rank), 47100 + rank, mib)))
"""


def loopback(mib: int) -> float:
    """MiB/s each way of the exchange between two processes over 127.0.0.1 (mean of the ranks)."""
    code = LOOPBACK.format(folder=str(EXAMPLE))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(mib)], stdout=subprocess.PIPE, text=True)
             for r in (0, 1)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    return statistics.mean(r["mib_per_s_each_way"] for r in results)


def gang_exchange(client: httpx.Client, mib: int) -> float:
    """MiB/s each way of one run of the example on the gang's network (mean of the ranks)."""
    text = (EXAMPLE / "job.yaml").read_text().replace("--mb 100", f"--mb {mib}")
    resp = client.post("/api/v1/jobs/", data={"spec": text},
                       files=[("files", ("exchange.py", (EXAMPLE / "exchange.py").read_bytes()))])
    resp.raise_for_status()
    job_id = resp.json()["id"]
    job = _wait_released(client, [job_id], timeout=120)[0]
    if job["outcome"] != "succeeded":
        raise RuntimeError(f"job {job_id}: {job['status_message']}")
    speeds = []
    for rank in (0, 1):
        bundle = client.get(f"/api/v1/jobs/{job_id}/bundle/?rank={rank}").content
        with tarfile.open(fileobj=io.BytesIO(bundle)) as tar:
            speeds.append(json.loads(tar.extractfile("exchange.json").read())["mib_per_s_each_way"])
    return statistics.mean(speeds)


def start_seconds(client: httpx.Client, nodes: int, jobs: int) -> list[float]:
    """Submit-to-running (s) of ``jobs`` trivial ``nodes``-node jobs, one at a time."""
    out = []
    for i in range(jobs):
        spec = trivial_spec(f"start-{nodes}-{i}")
        spec["compute"]["nodes"] = nodes
        job_id = client.post("/api/v1/jobs/", json=spec).json()["id"]
        out.append(_seconds(_wait_released(client, [job_id])[0]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with live_stack([("node-a", "2xH100-80GB"), ("node-b", "2xH100-80GB")]) as (stack, token):
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {token}"}, timeout=30)
        base = [loopback(args.mib) for _ in range(args.runs)]
        gang = [gang_exchange(client, args.mib) for _ in range(args.runs)]
        one, two = start_seconds(client, 1, args.jobs), start_seconds(client, 2, args.jobs)
    out = {
        "loopback_mib_per_s": round(statistics.median(base), 1),
        "gang_mib_per_s": round(statistics.median(gang), 1),
        "ratio": round(statistics.median(gang) / statistics.median(base), 2),
        "start_1_node_median_s": round(statistics.median(one), 3),
        "start_2_node_median_s": round(statistics.median(two), 3),
        "extra_start_s": round(statistics.median(two) - statistics.median(one), 3),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"exchange, {args.mib} MiB each way, median of {args.runs}: gang {out['gang_mib_per_s']} MiB/s, "
          f"loopback {out['loopback_mib_per_s']} MiB/s, ratio {out['ratio']} (goal >= 0.5)")
    print(f"submit-to-running, median of {args.jobs}: 1 node {out['start_1_node_median_s']} s, "
          f"2 nodes {out['start_2_node_median_s']} s, extra {out['extra_start_s']} s")


if __name__ == "__main__":
    main()
