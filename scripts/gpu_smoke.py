"""GPU smoke test: the standalone site plus one agent with real NVML discovery take a real CUDA job
(a PyTorch matrix product) through the five steps, inside the agent's tenant sandbox (bubblewrap:
a slot uid, only the leased GPU's device node). The job runs ``nvidia-smi -L`` and a torch CUDA
tensor in the sandbox; the script checks that it is not root and sees exactly the leased GPU (one
``/dev/nvidiaN``, one line of ``nvidia-smi -L`` naming its UUID, ``torch.cuda.device_count() == 1``).
On a host with several GPUs the job leases one and must see that one only.
Run on a machine with an NVIDIA GPU, PyTorch in the venv, and bubblewrap and slirp4netns:

    scripts/gpu_smoke.sh        # checks the driver, PyTorch and the sandbox tools first

Then, where podman, buildah, docker-registry and busybox are installed (issue 23), the same checks
for a container-image job: a busybox image built here is served by a registry on 127.0.0.1 and run
by podman (runc) on the leased GPU (CDI ``nvidia.com/gpu=N``: ``nvidia-ctk cdi generate`` must have
written the host's spec); it must run as the slot user and see exactly one ``/dev/nvidiaN``. Without
those tools the step is skipped and says so.

It prints the agent's inventory and GPU health, the job's log, its bundle's manifest and lease.
Exit status: 0 "SMOKE OK"; 1 a step failed ("SMOKE FAILED: ...", with the tail of the agent's
log); 2 this host has no GPU that NVML can see. The standalone site's two simulated agents are
drained, so the job can only run on the real GPU's node. Everything lives in a temporary var dir
(SQLite).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR / "agent"))

from e31_agent.inventory import collect, gpu_health  # noqa: E402

sys.path.insert(0, str(BASE_DIR))
from devstack import free_port  # noqa: E402
from devstack.registry import TOOLS as IMAGE_TOOLS  # noqa: E402
from devstack.registry import push_busybox_image, serve_registry  # noqa: E402

IMAGE_JOB = "id -u > uid.txt; ls /dev | grep -E '^nvidia[0-9]+$' > devs.txt; echo image-ok"

JOB = """
import glob, json, os, subprocess, torch
smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
print(smi.stdout, smi.stderr)
assert torch.cuda.is_available(), "no CUDA"
dev = torch.device("cuda")
a = torch.randn(4096, 4096, device=dev); b = torch.randn(4096, 4096, device=dev)
torch.cuda.synchronize(); import time; t = time.perf_counter()
for _ in range(20): c = a @ b
torch.cuda.synchronize(); dt = time.perf_counter() - t
tflops = 20 * 2 * 4096**3 / dt / 1e12
info = {"device": torch.cuda.get_device_name(0), "visible": __import__("os").environ["CUDA_VISIBLE_DEVICES"],
        "tflops_fp32": round(tflops, 1), "checksum": float(c.sum()), "uid": os.getuid(),
        "nvidia_smi": [l for l in smi.stdout.splitlines() if l.startswith("GPU ")],
        "dev_nodes": sorted(glob.glob("/dev/nvidia[0-9]*")),
        "device_count": torch.cuda.device_count()}
print(json.dumps(info)); json.dump(info, open("result.json", "w"))
"""


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


DRAIN_OTHERS = ("from apps.pool.models import Node; from apps.pool.services import node_set_drain; "
                "[node_set_drain(node=n, drain=True) for n in Node.objects.exclude(name='gpu-real')]; "
                "print(Node.objects.filter(name='gpu-real', drain=False).count())")


def released(api: httpx.Client, doc: dict, timeout_s: float = 600) -> dict:
    """Submit ``doc`` (retrying while the agent's GPU model is not yet known) and wait for its release."""
    deadline = time.monotonic() + 60
    while True:
        resp = api.post("/api/v1/jobs/", json=doc)
        if resp.status_code == 201 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    deadline = time.monotonic() + timeout_s
    while (job := api.get(f"/api/v1/jobs/{job_id}/").json())["state"] != "released":
        assert time.monotonic() < deadline, job
        time.sleep(1)
    return job


def bundle_files(api: httpx.Client, job: dict, names: tuple[str, ...]) -> dict[str, bytes]:
    """The named files of ``job``'s bundle (its sha256 checked), printing its manifest."""
    bundle = api.get(f"/api/v1/jobs/{job['id']}/bundle/").content
    assert hashlib.sha256(bundle).hexdigest() == job["bundle"]["sha256"]
    with tarfile.open(fileobj=io.BytesIO(bundle)) as tar:
        print("manifest:", tar.extractfile("manifest.json").read().decode())
        return {name: tar.extractfile(name).read() for name in names}


def image_step(api: httpx.Client, image: str | None, model: str) -> str:
    """Run the image job on the leased GPU (``image`` None: skipped); the line to print.

    Raises:
        AssertionError: the job failed, ran as root, or saw another number of GPU device nodes than one.
    """
    if image is None:
        return f"IMAGE SKIPPED: {', '.join(t for t in ('podman', *IMAGE_TOOLS) if not shutil.which(t))} not installed"
    job = released(api, {"name": "gpu-smoke-image", "work": {"command": IMAGE_JOB, "image": image, "network": "none"},
                         "compute": {"gpus": 1, "gpu_model": [model], "time_limit": "5m"},
                         "output": {"paths": ["uid.txt", "devs.txt"]}})
    print("image job:", json.dumps({k: job[k] for k in ("state", "outcome", "exit_code", "status_message")}))
    print("image log:", api.get(f"/api/v1/jobs/{job['id']}/logs/").text.strip())
    assert job["outcome"] == "succeeded", job
    files = bundle_files(api, job, ("uid.txt", "devs.txt"))
    devices = files["devs.txt"].decode().split()
    assert files["uid.txt"].strip() != b"0", files  # the slot user, not root
    assert len(devices) == 1, devices  # only the leased GPU's device node
    return f"IMAGE OK: uid {files['uid.txt'].decode().strip()}, devices {devices}"


def main() -> int:
    with ExitStack() as stack:
        return smoke(stack)


def smoke(stack: ExitStack) -> int:
    var = Path(tempfile.mkdtemp(prefix="e31-gpu-smoke-"))
    try:
        inventory = collect(workdir=var, simulate=None)
    except Exception as exc:  # NVML missing or broken: say so, not a traceback
        print(f"gpu_smoke: GPU discovery failed: {exc!r}", file=sys.stderr)
        return 2
    print("inventory:", json.dumps([g.__dict__ for g in inventory.gpus]))
    print("health:", json.dumps(gpu_health(inventory)))
    if not inventory.gpus:
        print("gpu_smoke: no GPU found through NVML (no NVIDIA GPU, driver or libnvidia-ml here)", file=sys.stderr)
        return 2
    model = inventory.gpus[0].model
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "E31_CELERY_EAGER")}
    env.update(E31_VAR_DIR=str(var), E31_PORT=str(port), E31_DEMO_PASSWORD="gpu-smoke-pw", PYTHONUNBUFFERED="1")
    image = None
    if all(shutil.which(t) for t in ("podman", *IMAGE_TOOLS)):
        (var / "registry").mkdir()
        address = stack.enter_context(serve_registry(var / "registry"))
        image = f"{address}/smoke/busy:1"
        push_busybox_image(var / "registry", image)
        env["E31_INSECURE_REGISTRIES"] = address
    manage(env, "migrate", "--noinput")
    site = subprocess.Popen([sys.executable, "manage.py", "standalone"], cwd=BASE_DIR, env=env,
                            stdout=open(var / "site.log", "wb"), stderr=subprocess.STDOUT)
    agent = None
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/accounts/login/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        token = manage(env, "issue_node_token", "gpu-real")
        agent = subprocess.Popen([sys.executable, "-m", "e31_agent.cli", "--server", url, "--workdir",
                                  str(var / "agents" / "gpu-real")], cwd=BASE_DIR,
                                 env={**env, "E31_NODE_TOKEN": token},
                                 stdout=open(var / "gpu-agent.log", "wb"), stderr=subprocess.STDOUT)
        api = httpx.Client(base_url=url, timeout=30,
                           headers={"Authorization": f"Token {manage(env, 'issue_token', 'demo')}"})
        deadline = time.monotonic() + 60
        while manage(env, "shell", "-c", DRAIN_OTHERS).splitlines()[-1:] != ["1"]:  # the real node is up
            if agent.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the GPU agent did not register (see gpu-agent.log)")
            time.sleep(1)
        manage(env, "shell", "-c", DRAIN_OTHERS)  # the simulated agents may have registered since
        doc = {"name": "gpu-smoke", "work": {"command": f"python - <<'PY'\n{JOB}\nPY", "network": "none"},
               "compute": {"gpus": 1, "gpu_model": [model], "time_limit": "10m"},
               "output": {"paths": ["result.json"]}}
        job = released(api, doc)  # the agent must have registered its GPU before the spec can name the model
        print("job:", json.dumps({k: job[k] for k in ("state", "outcome", "exit_code", "billed_seconds", "cost")}))
        print("log:", api.get(f"/api/v1/jobs/{job['id']}/logs/").text.strip())
        assert job["outcome"] == "succeeded", job
        result = json.loads(bundle_files(api, job, ("result.json",))["result.json"])
        assert result["visible"].startswith("GPU-") and "," not in result["visible"], result
        assert result["uid"] != 0, result  # a slot user, not root
        assert result["device_count"] == 1, result
        assert len(result["dev_nodes"]) == 1, result  # only the leased GPU's device node
        assert len(result["nvidia_smi"]) == 1 and result["visible"] in result["nvidia_smi"][0], result
        print(image_step(api, image, model))
        print("SMOKE OK:", json.dumps(result))
        return 0
    except (AssertionError, httpx.HTTPError, subprocess.CalledProcessError, KeyError) as exc:
        print(f"SMOKE FAILED: {exc!r}", file=sys.stderr)
        for log in ("gpu-agent.log", "site.log"):
            path = var / log
            if path.exists():
                print(f"--- {log} (tail) ---\n" + path.read_text(errors="replace")[-3000:], file=sys.stderr)
        return 1
    finally:
        for proc in (agent, site):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        print(f"logs in {var}")


if __name__ == "__main__":
    sys.exit(main())
