"""The network of a gang (issue 24 item 1, docs/SPEC.md §6): the ranks of one attempt reach each
other, and nothing else new is reachable.

Shape (as CNI's bridge and vxlan plugins give Kubernetes pods): each rank's sandbox gets a second
interface, ``gang0``, one end of a veth pair whose other end is a port of a bridge made for this
attempt alone (``e31b<name>``, no address of the host on it, IPv6 off, so the host does not answer
on it). Ranks on the same host share that bridge; ranks on other hosts are joined by a VXLAN device
of the attempt's VNI on the bridge (``e31x<name>``, UDP port :data:`VXLAN_PORT`, head-end
replication to each remote host of the gang). ``gang0`` holds the rank's address from the server
(``10.231.0.0/16`` by default: rank r at host r + 1), a connected route more specific than the
``10/8`` the sandbox denies, so the ranks meet on every port (gloo and NCCL open their own) while
the sandbox's other routes stay as they were: egress through slirp4netns, the host's addresses,
link-local and the private ranges unreachable. Another job's sandbox is on no bridge of this
attempt, so it cannot reach a rank.

A node with RDMA devices binds them into every gang rank (:func:`rdma_device_nodes`): InfiniBand
verbs then work from the sandbox; RoCE does not (its network device stays in the host's namespace).

Needs root (a veth in the host's namespace, moved into the sandbox's); :func:`available` says
whether this node can. Every change of the host's links is made under one file lock
(:data:`LOCK_PATH`), so two agents of one host (``make run``) never race on a shared bridge, and a
bridge left without ports (its shim was killed) is removed by the next detach on the host.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_PATH = "/run/e31-agent/gangnet.lock"
IFNAME = "gang0"
VXLAN_PORT = 4789  # IANA's VXLAN port
MTU_LOCAL = 65520  # ranks of one host only: as large as loopback's, so a byte costs as little
MTU_VXLAN = 1450  # 50 bytes of VXLAN over IPv4 on a 1500-byte underlay
BRIDGE_PREFIX, VXLAN_PREFIX, VETH_PREFIX = "e31b", "e31x", "e31v"


@dataclass(frozen=True)
class GangNet:
    """The server's ``gang_net`` of an assignment: ``name`` (8 hex, this attempt's alone on a
    site), ``vni`` (24-bit VXLAN id), ``prefix`` (bits) and ``addresses`` (one IPv4 address per
    node rank, rank 0 first)."""

    name: str
    vni: int
    prefix: int
    addresses: tuple[str, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> GangNet | None:
        """The assignment's ``gang_net``, or None when it has none (or one this agent cannot use)."""
        if not isinstance(data, dict):
            return None
        try:
            name = str(data["name"])
            addresses = tuple(str(ipaddress.IPv4Address(a)) for a in data["addresses"])
            net = cls(name=name, vni=int(data["vni"]), prefix=int(data["prefix"]), addresses=addresses)
        except (KeyError, TypeError, ValueError):
            return None
        if not (name.isalnum() and len(name) <= 8 and 0 < net.vni < 2**24 and 8 <= net.prefix <= 30):
            return None
        return net

    @property
    def master(self) -> str:
        """Rank 0's address: ``E31_MASTER_ADDR`` and ``MASTER_ADDR`` of every rank."""
        return self.addresses[0]


RDMA_DIR = "/dev/infiniband"


def rdma_device_nodes(root: str = RDMA_DIR) -> list[str]:
    """The node's RDMA device nodes (``/dev/infiniband/uverbs0``, ``rdma_cm``...), bound into a
    gang rank's sandbox so NCCL and MPI can use InfiniBand verbs; empty where there are none."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [f"{root}/{n}" for n in names if stat.S_ISCHR(os.stat(f"{root}/{n}").st_mode)]


def available() -> bool:
    """Whether this node can give a gang its network: root, with ``ip`` and ``nsenter``."""
    return os.geteuid() == 0 and all(shutil.which(t) for t in ("ip", "nsenter"))


def plan(net: GangNet, *, rank: int, hosts: Sequence[str]) -> dict[str, Any]:
    """The JSON the shim attaches rank ``rank`` with (``launch.json["sandbox"]["gang_net"]``).

    ``hosts``: each rank's host as the server knows it, rank 0 first; those that resolve to this
    host are joined on the bridge, the others over VXLAN to their first IPv4 address (a host that
    does not resolve is left out: its rank will not be reached, and its own log says why).
    """
    own = _own_addresses()
    peers = set()
    for i, host in enumerate(hosts):
        if i == rank:
            continue
        address = _resolve(host)
        if address and address not in own:
            peers.add(address)
    tag = hashlib.sha256(f"{net.name}:{rank}".encode()).hexdigest()[:8]
    return {
        "bridge": BRIDGE_PREFIX + net.name, "vxlan": VXLAN_PREFIX + net.name, "veth": VETH_PREFIX + tag,
        "vni": net.vni, "address": f"{net.addresses[rank]}/{net.prefix}", "peers": sorted(peers),
        "mtu": MTU_VXLAN if peers else MTU_LOCAL,
    }


def attach(pid: int, gang: dict[str, Any]) -> None:
    """Give the sandbox whose process is ``pid`` its ``gang0`` on the attempt's bridge (made if
    it is the host's first rank of the gang). Root only. Raises ``OSError`` with ``ip``'s words."""
    br, vx, host_end, mtu = gang["bridge"], gang["vxlan"], gang["veth"], str(gang["mtu"])
    inner = host_end.replace(VETH_PREFIX, "e31p", 1)
    with _locked():
        if not _exists(br):
            _ip("link", "add", br, "type", "bridge")
            _ipv6_off(br)
        if gang["peers"] and not _exists(vx):
            _ip("link", "add", vx, "type", "vxlan", "id", str(gang["vni"]), "dstport", str(VXLAN_PORT))
            _ip("link", "set", vx, "master", br, "mtu", mtu, "up")
        for peer in gang["peers"]:
            # head-end replication: broadcast and unknown frames go to every remote host of the gang
            _run(["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", vx, "dst", peer], check=False)
        _ip("link", "set", br, "up")
        if _exists(host_end):  # a killed attempt of the same rank left it
            _ip("link", "del", host_end)
        _ip("link", "add", host_end, "mtu", mtu, "type", "veth", "peer", "name", inner, "mtu", mtu)
        _ipv6_off(host_end)
        _ip("link", "set", host_end, "master", br, "up")
        _ip("link", "set", inner, "netns", str(pid))
    enter = ["nsenter", f"--net=/proc/{pid}/ns/net"]
    _run([*enter, "ip", "link", "set", inner, "name", IFNAME])
    _run([*enter, "sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{IFNAME}/disable_ipv6 || true"])
    _run([*enter, "ip", "addr", "add", gang["address"], "dev", IFNAME])
    _run([*enter, "ip", "link", "set", IFNAME, "up"])


def detach(gang: dict[str, Any]) -> None:
    """The rank's attempt has ended: remove its veth (gone already if its namespace went) and every
    gang bridge of the host left with no rank on it. Never raises."""
    try:
        with _locked():
            if _exists(gang["veth"]):
                _ip("link", "del", gang["veth"], check=False)
            for br in _bridges():
                ports = [p for p in _ports(br) if not p.startswith(VXLAN_PREFIX)]
                if not ports:
                    _ip("link", "del", VXLAN_PREFIX + br[len(BRIDGE_PREFIX):], check=False)
                    _ip("link", "del", br, check=False)
    except OSError:
        pass


# -- the host's links ------------------------------------------------------------------------------


class _Lock:
    def __init__(self) -> None:
        Path(LOCK_PATH).parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _locked() -> _Lock:
    return _Lock()


def _ip(*args: str, check: bool = True) -> None:
    _run(["ip", *args], check=check)


def _run(argv: list[str], *, check: bool = True) -> None:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    if check and done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise OSError(f"{' '.join(argv[:6])}: {why or f'exit {done.returncode}'}")


def _exists(link: str) -> bool:
    return os.path.exists(f"/sys/class/net/{link}")


def _ipv6_off(link: str) -> None:
    path = Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6")
    if path.exists():  # no IPv6 link-local address: the host is not reachable over the bridge
        path.write_text("1")


def _bridges() -> list[str]:
    return sorted(n for n in os.listdir("/sys/class/net")
                  if n.startswith(BRIDGE_PREFIX) and os.path.isdir(f"/sys/class/net/{n}/bridge"))


def _ports(bridge: str) -> list[str]:
    try:
        return os.listdir(f"/sys/class/net/{bridge}/brif")
    except OSError:
        return []


def _own_addresses() -> set[str]:
    try:
        out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, timeout=10, check=True).stdout
        links = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        links = []
    found = {a.get("local") for link in links for a in link.get("addr_info") or []}
    return {a for a in found if a} | {"127.0.0.1", "127.0.1.1"}


def _resolve(host: str) -> str | None:
    if host in (socket.gethostname(), socket.getfqdn(), "localhost"):
        return "127.0.0.1"
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return None
    address = str(infos[0][4][0]) if infos else None
    if address and ipaddress.ip_address(address).is_loopback:
        return "127.0.0.1"
    return address
