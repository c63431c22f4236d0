"""A hostile tenant against the job sandbox (issue 11, item 1; docs/security.md "Tenant sandbox").

Real uvicorn, Celery worker and two agents (tests/e2e ``live_stack``), run as
root as on a production host. Two users each run :mod:`probe` as a job, at
the same time; it tries, from inside its sandbox, what docs/security.md lists
and writes down what worked (``result.json``, brought back in its bundle).
It must not: be root or hold a capability; read the site's ``var/``, the
secret key, the agents' work dirs, caches, logs, tokens, the other job's
files, the other user's uploads, the source tree; see, signal or read the
environment of any process outside its sandbox (the agents, the other job);
reach the web, PostgreSQL or Redis on this host, through any address, with
``network: egress``; reach anything with ``network: none``. It must: read its
staged input, write its output, see ``CUDA_VISIBLE_DEVICES``, and fetch from
an "outside" HTTP server, a stand-in in a network namespace this test makes
(``198.18.231.2``, the benchmark range, on a veth pair; nothing else is ever
targeted but this host's own addresses).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
from django.conf import settings

from apps.artifacts.models import Upload
from apps.pool.models import Gpu
from tests.e2e.test_data import _wait as wait
from tests.e2e.test_five_steps import token_client, wait_released
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PROBE = (Path(__file__).parent / "probe.py").read_bytes()
NS, HOST_IF, NS_IF = "e31probe", "e31probe-h", "e31probe-n"
HOST_ADDR, OUTSIDE_ADDR, OUTSIDE_PORT = "198.18.231.1", "198.18.231.2", 8099
OUTSIDE_BODY = "hello from outside\n"


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


@contextlib.contextmanager
def outside_server(tmp_path: Path):
    """An HTTP server in a network namespace of its own, reached from the host over a veth pair."""
    if os.geteuid() != 0:
        pytest.fail("the sandbox security tests need root (network namespaces for the stand-in server)")
    _ip("netns", "del", NS, check=False)
    _ip("link", "del", HOST_IF, check=False)
    root = tmp_path / "outside"
    root.mkdir()
    (root / "hello.txt").write_text(OUTSIDE_BODY)
    _ip("netns", "add", NS)
    server = None
    try:
        _ip("link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        _ip("link", "set", NS_IF, "netns", NS)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", HOST_IF)
        _ip("link", "set", HOST_IF, "up")
        _ip("netns", "exec", NS, "ip", "addr", "add", f"{OUTSIDE_ADDR}/30", "dev", NS_IF)
        _ip("netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
        server = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-m", "http.server", str(OUTSIDE_PORT),
                                   "--bind", OUTSIDE_ADDR, "--directory", str(root)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://{OUTSIDE_ADDR}:{OUTSIDE_PORT}/hello.txt"
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(url, timeout=1).text == OUTSIDE_BODY:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the stand-in outside server did not come up"
            time.sleep(0.2)
        yield url
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _ip("netns", "del", NS, check=False)
        _ip("link", "del", HOST_IF, check=False)


def host_addresses() -> list[str]:
    out = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, check=True).stdout)
    return sorted({a["local"] for link in out for a in link.get("addr_info", []) if a.get("family") == "inet"})


def upload(api: httpx.Client, name: str, payload: bytes) -> int:
    resp = api.post("/api/v1/uploads/", files={"file": (name, payload)})
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def submit(api: httpx.Client, *, name: str, probe_id: int, input_id: int, orders: dict, network: str = "egress",
           outputs: tuple[str, ...] = ("result.json",)) -> int:
    doc = {"name": name,
           "work": {"command": "python probe.py", "network": network, "env": {"PROBE_CONFIG": json.dumps(orders)}},
           "data": [{"source": f"upload:{probe_id}", "target": "probe.py"},
                    {"source": f"upload:{input_id}", "target": "input.bin"}],
           "compute": {"gpus": 1, "time_limit": "3m"}, "output": {"paths": list(outputs)}}
    resp = api.post("/api/v1/jobs/", json=doc)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def bundle(api: httpx.Client, job_id: int) -> dict[str, bytes]:
    resp = api.get(f"/api/v1/jobs/{job_id}/bundle/")
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def job_processes(job_id: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("E31_JOB_ID") == str(job_id):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def assert_sealed(who: str, res: dict, secrets: set[str]) -> None:
    """What every probe's ``result.json`` must say, on any shape of the site."""
    # never root, no capability, no_new_privs
    assert res["uid"] != 0 and res["euid"] != 0 and res["gid"] != 0, (who, res["uid"])
    assert int(res["cap_eff"], 16) == 0 and int(res["cap_bnd"], 16) == 0, (who, res["cap_eff"])
    assert res["no_new_privs"] == "1", who
    # nothing of the agent's, the site's or the other tenant's could be read, seen or signalled
    assert res["leaks"] == {}, (who, res["leaks"])
    # only its own processes are visible: the sandbox's init, the shell, the probe (and what it runs)
    assert all(uid == res["uid"] for uid, _ in res["visible_processes"].values()), (who, res["visible_processes"])
    assert len(res["visible_processes"]) <= 4, (who, res["visible_processes"])
    # its environment holds no secret of the platform
    assert not any(v in secrets for v in res["env"].values()), who
    assert not any(k.startswith(("E31_NODE_TOKEN", "DATABASE_", "REDIS_", "SECRET")) for k in res["env"]), who
    # it can see its own GPUs
    assert res["cuda_visible_devices"], who


def forbidden_tcp(web_port: int) -> list[list]:
    """The site's web port, PostgreSQL and Redis, at every address of this host, at the sandbox's
    own loopback and at slirp4netns's host alias 10.0.2.2."""
    ports = [web_port, 5432, 6379]
    hosts = ["127.0.0.1", "10.0.2.2", *host_addresses()]
    return [[h, p] for h in dict.fromkeys(hosts) for p in ports]


# /proc/net/route destinations (little-endian hex) of what egress must find unreachable: the cloud
# metadata range and the private networks (sandbox.DEFAULT_DENY)
DENIED_ROUTES = {"0000FEA9": "169.254.0.0/16", "0000000A": "10.0.0.0/8", "000010AC": "172.16.0.0/12",
                 "0000A8C0": "192.168.0.0/16", "00004064": "100.64.0.0/10"}


def unreachable_routes(routes: list[str]) -> set[str]:
    """The destinations of the reject (RTF_REJECT) routes in a probe's ``/proc/net/route`` lines."""
    return {fields[1] for fields in map(str.split, routes) if int(fields[3], 16) & 0x0200}


def test_two_tenants_probe_their_sandboxes(stack, tmp_path):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    a_api, b_api = token_client(stack.url, alice), token_client(stack.url, bob)
    var = stack.var_dir
    secret_input = os.urandom(4096)
    with outside_server(tmp_path) as outside_url:
        a_probe, b_probe = upload(a_api, "probe.py", PROBE), upload(b_api, "probe.py", PROBE)
        a_input, b_input = upload(a_api, "a.bin", secret_input), upload(b_api, "b.bin", b"bob's private data")
        b_upload_path = var / "media" / Upload.objects.get(pk=b_input).file.name
        assert b_upload_path.is_file()
        agents = [stack.named[f"agent-{n}"].pid for n, _ in stack.agents]
        web_port = stack.ports[0]
        common = {
            "forbidden_tcp": forbidden_tcp(web_port), "allowed_url": outside_url, "input": "input.bin",
            "forbidden_paths": [
                str(var), str(var / "secret_key"), str(var / "media"), str(b_upload_path),
                str(var / "agents"), *[str(var / "agents" / n / d) for n, _ in stack.agents
                                       for d in ("", "cache", "runs", "logs", "bundles", "tmp", "jobs")],
                str(Path(settings.BASE_DIR) / "manage.py"), str(Path(settings.BASE_DIR) / "e31site"),
                str(Path(settings.BASE_DIR) / "var"), "/etc/shadow", "/root/.ssh", "/run/e31-agent",
                *[f"/proc/{pid}/environ" for pid in agents],
            ],
            "forbidden_pids": [*agents, os.getpid()],
        }
        # bob's job first: it probes, then stays alive as the target of alice's probe
        bob_job = submit(b_api, name="bob-probe", probe_id=b_probe, input_id=b_input,
                         orders={**common, "linger_s": 20}, outputs=("result.json", "survived.txt"))
        bob_dir = wait(lambda: next((p for p in var.glob(f"agents/*/jobs/{bob_job}") if (p / "result.json").exists()),
                                    None), 90, "bob's probe to run")
        bob_pids = [p.pid for p in job_processes(bob_job)]
        assert bob_pids, "bob's job has no processes"
        alice_orders = {**common,
                        "forbidden_paths": [*common["forbidden_paths"], str(bob_dir), str(bob_dir / "input.bin"),
                                            str(bob_dir / "result.json")],
                        "forbidden_pids": [*common["forbidden_pids"], *bob_pids]}
        alice_job = submit(a_api, name="alice-probe", probe_id=a_probe, input_id=a_input, orders=alice_orders)
        alice_offline = submit(a_api, name="alice-offline", probe_id=a_probe, input_id=a_input, network="none",
                               orders={"forbidden_tcp": [[OUTSIDE_ADDR, OUTSIDE_PORT], *forbidden_tcp(web_port)],
                                       "input": "input.bin"})
        jobs = wait_released(a_api, [alice_job, alice_offline], timeout=150)
        bob_done = wait_released(b_api, [bob_job], timeout=90)[bob_job]

    assert all(j["exit_code"] == 0 for j in jobs.values()), jobs
    assert bob_done["exit_code"] == 0, bob_done
    alice = json.loads(bundle(a_api, alice_job)["result.json"])
    offline = json.loads(bundle(a_api, alice_offline)["result.json"])
    bob_files = bundle(b_api, bob_job)
    bob = json.loads(bob_files["result.json"])
    assert bob_files["survived.txt"] == b"survived\n"  # alice's probe could not stop or kill it
    secrets = {settings.SECRET_KEY, *stack.tokens.values()}
    secret_file = var / "secret_key"
    if secret_file.exists():
        secrets.add(secret_file.read_text().strip())
    for who, res in (("alice", alice), ("bob", bob), ("alice offline", offline)):
        assert_sealed(who, res, secrets)
    # different tenants running at the same time: different uids
    assert alice["uid"] != bob["uid"]
    # they can read their staged inputs and write outputs (result.json came back)
    assert alice["input_sha256"] == hashlib.sha256(secret_input).hexdigest()
    assert bob["input_sha256"] == hashlib.sha256(b"bob's private data").hexdigest()
    # egress reaches the outside, and nothing of this host's
    assert alice.get("allowed_url") == OUTSIDE_BODY, alice.get("allowed_url_error")
    assert bob.get("allowed_url") == OUTSIDE_BODY, bob.get("allowed_url_error")
    # no descriptor of the sandbox's setup leaks in: stdin, the log, and the listing's own
    for res in (alice, bob):
        leftover = {fd: t for fd, t in res["open_fds"].items() if fd not in ("0", "1", "2")}
        assert all(t.startswith("/proc/") for t in leftover.values()) and len(leftover) <= 1, res["open_fds"]
    # egress: the cloud metadata range is an unreachable route (RTF_REJECT), as is every host address
    reject = [line.split() for line in alice["routes"] if int(line.split()[3], 16) & 0x0200]
    assert any(fields[1] == "0000FEA9" for fields in reject), alice["routes"]
    # network: none has loopback only
    assert offline["interfaces"] == ["lo"] and offline["routes"] == [], offline
    # CUDA_VISIBLE_DEVICES names the one leased GPU, by UUID
    for res in (alice, bob):
        visible = res["cuda_visible_devices"].split(",")
        assert len(visible) == 1 and Gpu.objects.filter(uuid=visible[0]).exists(), visible


def test_a_network_value_other_than_egress_or_none_is_refused(stack):
    api = token_client(stack.url, UserFactory())
    resp = api.post("/api/v1/jobs/", json={"name": "x", "work": {"command": "true", "network": "host"},
                                           "compute": {"gpus": 1, "time_limit": "1m"}})
    assert resp.status_code == 400
    assert "work.network" in json.dumps(resp.json())
