"""A hostile tenant's probe, run as a job's command inside the sandbox (tests/security).

Reads its orders from ``$PROBE_CONFIG`` (JSON) and writes what it managed to
``result.json`` in the job dir; the test asserts on that file, which comes
back in the job's bundle. Stdlib only: it runs on the agent's Python.

Orders: ``forbidden_paths`` (files or dirs to read), ``forbidden_pids``
(host pids of other processes to see, signal, read the environment of),
``forbidden_tcp`` ([host, port] pairs to connect to), ``allowed_url`` (to
fetch; its body is returned), ``input`` (a staged file to read),
``linger_s`` (stay alive this long after probing, then write
``survived.txt``).
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request


def status_field(name: str) -> str:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def try_read(path: str) -> str | None:
    """What could be read at ``path`` (a dir's listing, a file's first bytes), None when nothing."""
    try:
        if os.path.isdir(path):
            return "dir: " + ",".join(sorted(os.listdir(path))[:20])
        with open(path, "rb") as fh:
            return "file: " + fh.read(64).hex()
    except OSError:
        return None


def try_connect(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except OSError:
        return None


def try_signal(pid: int) -> list[str]:
    done = []
    for sig in (0, signal.SIGSTOP, signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(pid, sig)
            done.append(f"signal {sig} delivered")
        except OSError:
            pass
    return done


def main() -> None:
    orders = json.loads(os.environ["PROBE_CONFIG"])
    result: dict = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
                    "cap_eff": status_field("CapEff"), "cap_bnd": status_field("CapBnd"),
                    "no_new_privs": status_field("NoNewPrivs"), "env": dict(os.environ),
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "leaks": {}}
    try:
        os.setuid(0)
        result["leaks"]["setuid(0)"] = "worked"
    except OSError:
        pass
    new_userns = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True)
    if new_userns.returncode == 0:
        result["leaks"]["unshare --user"] = "worked"
    for path in orders.get("forbidden_paths", []):
        got = try_read(path)
        if got is not None:
            result["leaks"][f"read {path}"] = got
    visible = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                visible[entry] = [os.stat(f"/proc/{entry}").st_uid,
                                  open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:80]]
            except OSError:
                pass
    result["visible_processes"] = visible
    for pid in orders.get("forbidden_pids", []):
        got = try_read(f"/proc/{pid}/environ")
        if got is not None:
            result["leaks"][f"environ of {pid}"] = got
        sent = try_signal(int(pid))
        if sent:
            result["leaks"][f"signal {pid}"] = ", ".join(sent)
    for host, port in orders.get("forbidden_tcp", []):
        if try_connect(host, int(port)):
            result["leaks"][f"tcp {host}:{port}"] = "connected"
    if orders.get("allowed_url"):
        try:
            with urllib.request.urlopen(orders["allowed_url"], timeout=10) as resp:
                result["allowed_url"] = resp.read().decode()
        except OSError as exc:
            result["allowed_url_error"] = str(exc)
    if orders.get("input"):
        with open(orders["input"], "rb") as fh:
            result["input_sha256"] = hashlib.sha256(fh.read()).hexdigest()
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    result["open_fds"] = fds
    result["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    try:
        with open("/proc/net/route") as fh:
            result["routes"] = fh.read().splitlines()[1:]
    except OSError:
        result["routes"] = []
    with open("result.json.tmp", "w") as fh:
        json.dump(result, fh)
    os.replace("result.json.tmp", "result.json")
    if orders.get("linger_s"):
        time.sleep(float(orders["linger_s"]))
        with open("survived.txt", "w") as fh:
            fh.write("survived\n")


if __name__ == "__main__":
    main()
