"""Every rank of a multi-node job sends data to the next rank over TCP and receives from the one
before it (a ring: with two nodes, one connection each way), on the rendezvous port the platform
gives (``E31_MASTER_PORT``, torchrun's ``MASTER_PORT``) at the addresses of the MPI hostfile
(``E31_HOSTFILE``; run by hand without one, it is a gang of one on 127.0.0.1). Each rank checks
the bytes it got (sha256 of a known stream) and writes ``exchange.json``: bytes each way, seconds
and MiB/s, as the receiver saw them. Standard library only.

    python exchange.py [--mb 100]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import threading
import time

BLOCK = 1 << 20  # bytes per send


def stream(seed: int, blocks: int):
    """``blocks`` MiB of bytes that depend on ``seed`` (the sender's rank)."""
    block = hashlib.sha256(str(seed).encode()).digest() * (BLOCK // 32)
    for _ in range(blocks):
        yield block


def receive(server: socket.socket, into: dict) -> None:
    conn, _ = server.accept()
    started = time.monotonic()  # from the connection: the sender may start later than this rank
    digest, size = hashlib.sha256(), 0
    while chunk := conn.recv(BLOCK):
        digest.update(chunk)
        size += len(chunk)
    into.update(bytes=size, sha256=digest.hexdigest(), seconds=time.monotonic() - started)


def connect(host: str, port: int, wait_s: float = 60.0) -> socket.socket:
    """A connection to the next rank, which may start a few seconds after this one."""
    end = time.monotonic() + wait_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def exchange(rank: int, nodes: int, peer: tuple[str, int], listen_port: int, mib: int) -> dict:
    """Send ``mib`` MiB to ``peer`` (the next rank) while receiving from the rank before on
    ``listen_port``; the result ``exchange.json`` holds (bytes, and the seconds and MiB/s of the
    receiving side, from its connection to its last byte)."""
    server = socket.create_server(("0.0.0.0", listen_port))
    got: dict = {}
    listener = threading.Thread(target=receive, args=(server, got))
    listener.start()
    with connect(*peer) as out:
        for block in stream(rank, mib):
            out.sendall(block)
    listener.join()
    seconds = max(got.get("seconds", 0.0), 1e-6)
    want = hashlib.sha256()
    for block in stream((rank - 1) % nodes, mib):
        want.update(block)
    return {"rank": rank, "sent_bytes": mib * BLOCK, "received_bytes": got.get("bytes"),
            "intact": got.get("sha256") == want.hexdigest(), "seconds": round(seconds, 3),
            "mib_per_s_each_way": round(mib / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MiB to send to the next rank")
    args = parser.parse_args()
    env = os.environ
    print(" ".join(f"{k}={env.get(k, '')}" for k in ("E31_JOB_ID", "E31_NODE_RANK", "E31_NUM_NODES",
                                                     "CUDA_VISIBLE_DEVICES")), flush=True)
    rank, nodes = int(env.get("E31_NODE_RANK", "0")), int(env.get("E31_NUM_NODES", "1"))
    port = int(env.get("E31_MASTER_PORT", "29500"))
    hostfile = env.get("E31_HOSTFILE")  # by hand, without one: a gang of one on this host
    hosts = [line.split()[0] for line in open(hostfile) if line.strip()] if hostfile else ["127.0.0.1"]
    print(f"rank {rank} of {nodes} at {hosts[rank]}; master {env.get('E31_MASTER_ADDR', hosts[0])}:{port}",
          flush=True)
    result = exchange(rank, nodes, (hosts[(rank + 1) % nodes], port), port, args.mb)
    print(json.dumps(result), flush=True)
    with open("exchange.json", "w") as fh:
        json.dump(result, fh)
    raise SystemExit(0 if result["intact"] else 1)


if __name__ == "__main__":
    main()
