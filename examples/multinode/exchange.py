"""Every rank of a multi-node job sends data to the next rank over TCP and receives from the one
before it (a ring: with two nodes, one connection each way), on the rendezvous port the platform
gives (``MASTER_PORT``) at the addresses of the MPI hostfile (``E31_HOSTFILE``). Each rank checks
the bytes it got (sha256 of a known stream) and writes ``exchange.json``: bytes each way, seconds
and MiB/s each way. Standard library only.

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
    digest, size = hashlib.sha256(), 0
    while chunk := conn.recv(BLOCK):
        digest.update(chunk)
        size += len(chunk)
    into.update(bytes=size, sha256=digest.hexdigest())


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MiB to send to the next rank")
    args = parser.parse_args()
    rank, nodes, port = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"]), int(os.environ["MASTER_PORT"])
    hosts = [line.split()[0] for line in open(os.environ["E31_HOSTFILE"]) if line.strip()]
    print(f"job {os.environ.get('E31_JOB_ID')} rank {rank} of {nodes} at {hosts[rank]}; "
          f"master {os.environ['MASTER_ADDR']}:{port}", flush=True)
    server = socket.create_server(("0.0.0.0", port), reuse_port=False)
    got: dict = {}
    listener = threading.Thread(target=receive, args=(server, got))
    listener.start()
    started = time.monotonic()
    with connect(hosts[(rank + 1) % nodes], port) as out:
        for block in stream(rank, args.mb):
            out.sendall(block)
    listener.join()
    seconds = time.monotonic() - started
    want = hashlib.sha256()
    for block in stream((rank - 1) % nodes, args.mb):
        want.update(block)
    ok = got.get("sha256") == want.hexdigest()
    result = {"rank": rank, "sent_bytes": args.mb * BLOCK, "received_bytes": got.get("bytes"), "intact": ok,
              "seconds": round(seconds, 3), "mib_per_s_each_way": round(args.mb / seconds, 1)}
    print(json.dumps(result), flush=True)
    with open("exchange.json", "w") as fh:
        json.dump(result, fh)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
