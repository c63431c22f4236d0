"""The gang's own network (issue 24 item 1) on real sandboxes: two agents of one host (as
``make run``) each run one rank; the ranks open a TCP connection each way on ``$MASTER_PORT`` and
send 100 MB over each, while a job of another tenant on the same nodes cannot reach either rank,
and neither rank reaches the host or the platform."""

import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from e31_agent import gangnet
from e31_agent.agent import Agent
from e31_agent.config import AgentConfig

from .fake_server import TOKEN, FakeServer
from .test_agent import assignment, bundle_files, job_processes, offer

pytestmark = pytest.mark.skipif(not gangnet.available(), reason="the gang network needs root")

EXCHANGE = Path(__file__).resolve().parents[2] / "examples" / "multinode" / "exchange.py"

AFTER = r"""
import json, os, socket, time
port = int(os.environ["MASTER_PORT"])
def reach(host, p):
    try:
        socket.create_connection((host, p), timeout=2).close(); return True
    except OSError:
        return False
seen = {"master": os.environ["MASTER_ADDR"], "hosts": [line.split()[0] for line in open(os.environ["E31_HOSTFILE"])],
        "host": reach(os.environ["HOST_ADDR"], int(os.environ["PLATFORM_PORT"])), "intruders": []}
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(4); s.settimeout(0.2)
end = time.monotonic() + 8  # the port stays open a while: another tenant's probe must not get in
while time.monotonic() < end:
    try:
        seen["intruders"].append(str(s.accept()[1]))
    except OSError:
        pass
json.dump(seen, open("rank.json", "w"))
"""

PROBE = r"""
import json, os, socket
def reach(host, p):
    try:
        socket.create_connection((host, p), timeout=2).close(); return True
    except OSError as exc:
        return str(exc)
json.dump({h: reach(h, int(os.environ["MASTER_PORT"])) for h in ("10.231.0.1", "10.231.0.2")}, open("probe.json", "w"))
"""


@pytest.fixture
def two_nodes(tmp_path):
    with FakeServer() as server_a, FakeServer() as server_b:
        agents = []
        for name, server in (("a", server_a), ("b", server_b)):
            config = AgentConfig(server=server.url, token=TOKEN, workdir=tmp_path / name,
                                 simulate="2xH100-80GB", shutdown_grace_s=1)
            agent = Agent(config)
            thread = threading.Thread(target=agent.run, daemon=True)
            thread.start()
            agents.append((agent, thread))
        yield server_a, server_b, tmp_path
        for agent, thread in agents:
            agent.stop()
            thread.join(20)
        for name in ("a", "b"):
            assert job_processes(tmp_path / name) == []


def rank(server, job_id, r, host_addr, platform_port):
    server.state.uploads["x"] = ("exchange.py", EXCHANGE.read_bytes())
    job = assignment(job_id, f"python3 exchange.py --mb 100 && python3 - <<'PY'\n{AFTER}\nPY",
                     outputs=["rank.json", "exchange.json"],
                     data=[{"source": "upload:x", "target": "exchange.py", "sha256": None, "extract": False}])
    net = {"name": "0f1e2d3c", "vni": 4242, "prefix": 16, "addresses": ["10.231.0.1", "10.231.0.2"]}
    job["env"] |= {"E31_NODE_RANK": str(r), "NODE_RANK": str(r), "E31_NUM_NODES": "2", "NNODES": "2",
                   "E31_MASTER_ADDR": "vm", "MASTER_ADDR": "vm", "MASTER_PORT": "29601", "E31_MASTER_PORT": "29601",
                   "HOST_ADDR": host_addr, "PLATFORM_PORT": str(platform_port)}
    job["spec"]["work"]["network"] = "egress"
    job["spec"]["compute"]["nodes"] = 2
    job["gang"] = [{"rank": 0, "host": "localhost", "gpus": 1}, {"rank": 1, "host": "localhost", "gpus": 1}]
    job["gang_net"] = net
    return job


def test_two_ranks_exchange_100_mb_each_way_and_nothing_else_reaches_them(two_nodes):
    server_a, server_b, root = two_nodes
    host_addr = next(a.split("/")[0] for a in gangnet_host_addresses())
    offer(server_a, rank(server_a, 61, 0, host_addr, urlsplit(server_a.url).port))
    offer(server_b, rank(server_b, 61, 1, host_addr, urlsplit(server_b.url).port))
    # another tenant's gang on node a: a bridge of its own, though its addresses are the same
    probe = assignment(62, f"python3 - <<'PY'\n{PROBE}\nPY", outputs=["probe.json"], gpus=[0])
    probe["env"]["MASTER_PORT"] = "29601"
    probe["gang"] = [{"rank": 0, "host": "localhost", "gpus": 1}, {"rank": 1, "host": "nowhere.invalid", "gpus": 1}]
    probe["gang_net"] = {"name": "99887766", "vni": 4243, "prefix": 16, "addresses": ["10.231.0.1", "10.231.0.2"]}
    assert server_a.state.wait_for(lambda: "running" in server_a.state.types(61), 30)
    exchanged = root / "a" / "jobs" / "61" / "exchange.json"
    assert server_a.state.wait_for(exchanged.exists, 60)  # rank 0 is past the exchange, guarding its port
    offer(server_a, probe)  # another tenant's job on node a while the gang runs
    for server in (server_a, server_b):
        assert server.state.wait_for(lambda s=server: "finished" in s.state.types(61), 90)
    assert server_a.state.wait_for(lambda: "finished" in server_a.state.types(62), 30)
    for server in (server_a, server_b):
        files = bundle_files(server, 61)
        exchanged, seen = json.loads(files["exchange.json"]), json.loads(files["rank.json"])
        assert exchanged["received_bytes"] == 100 * 1024 * 1024 and exchanged["intact"], exchanged
        assert seen["master"] == "10.231.0.1" and seen["hosts"] == ["10.231.0.1", "10.231.0.2"]
        assert seen["host"] is False  # the host (and the platform on it) stays out of reach
        assert seen["intruders"] == []
    probed = json.loads(bundle_files(server_a, 62)["probe.json"])
    assert all(v is not True for v in probed.values()), probed
    assert not [n for n in gangnet._bridges() if n == "e31b0f1e2d3c"]  # the bridge went with the last rank


def gangnet_host_addresses():
    from e31_agent.sandbox import host_addresses

    return host_addresses()


def test_a_rank_with_a_peer_on_another_host_is_joined_to_it_over_vxlan_and_all_is_removed_after():
    import subprocess

    net = gangnet.GangNet(name="a1b2c3d4", vni=777, prefix=16, addresses=("10.231.0.1", "10.231.0.2"))
    plan = gangnet.plan(net, rank=0, hosts=["localhost", "192.0.2.77"])
    assert plan["peers"] == ["192.0.2.77"] and plan["mtu"] == gangnet.MTU_VXLAN
    assert gangnet.plan(net, rank=0, hosts=["localhost", "localhost"])["peers"] == []
    sandbox = subprocess.Popen(["unshare", "--net", "sleep", "30"])  # a network namespace, as bubblewrap's
    try:
        time.sleep(0.2)
        gangnet.attach(sandbox.pid, plan)
        vxlan = subprocess.run(["ip", "-d", "link", "show", "e31xa1b2c3d4"], capture_output=True, text=True).stdout
        assert "vxlan id 777" in vxlan and "master e31ba1b2c3d4" in vxlan
        fdb = subprocess.run(["bridge", "fdb", "show", "dev", "e31xa1b2c3d4"], capture_output=True, text=True).stdout
        assert "dst 192.0.2.77" in fdb
        inside = subprocess.run(["nsenter", f"--net=/proc/{sandbox.pid}/ns/net", "ip", "-o", "addr", "show", "gang0"],
                                capture_output=True, text=True).stdout
        assert "10.231.0.1/16" in inside and "inet6" not in inside  # no IPv6 on the gang's interface
    finally:
        sandbox.kill()
        sandbox.wait()
        gangnet.detach(plan)
    assert not [n for n in gangnet._bridges() if n == "e31ba1b2c3d4"]
    assert subprocess.run(["ip", "link", "show", "e31xa1b2c3d4"], capture_output=True).returncode != 0


def test_a_node_s_rdma_devices_are_found_for_its_gang_ranks(tmp_path):
    import os
    import stat

    os.mknod(tmp_path / "uverbs0", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    (tmp_path / "README").write_text("not a device")
    assert gangnet.rdma_device_nodes(str(tmp_path)) == [f"{tmp_path}/uverbs0"]
    assert gangnet.rdma_device_nodes(str(tmp_path / "none")) == []
