"""The agent's settings and the layout of its work directory."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Workdir:
    """``WORKDIR`` and what lives in it.

    ``jobs/<job_id>/`` job dirs (mode 0700), ``logs/`` the combined output of
    each attempt, ``bundles/`` packed outputs, ``cache/`` staged inputs kept
    across jobs, ``tmp/`` downloads in progress, ``runs/<job>-<attempt>/``
    what a restarted agent needs to take a run up again. Logs, bundles and temporary
    files stay outside the job dirs, out of the jobs' reach.
    """

    root: Path

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def bundles(self) -> Path:
        return self.root / "bundles"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def runs(self) -> Path:
        """One state dir per attempt (:mod:`e31_agent.state`)."""
        return self.root / "runs"

    @property
    def scope(self) -> str:
        """A short id of this workdir, used to mark the processes of its jobs."""
        return hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]

    def job_dir(self, job_id: int) -> Path:
        return self.jobs / str(job_id)

    def run_dir(self, job_id: int, attempt: int) -> Path:
        return self.runs / f"{job_id}-{attempt}"

    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.logs / f"{job_id}-{attempt}.log"

    def bundle_path(self, job_id: int, attempt: int) -> Path:
        return self.bundles / f"{job_id}-{attempt}.tar"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for path in (self.jobs, self.logs, self.bundles, self.cache, self.tmp, self.runs):
            path.mkdir(mode=0o700, exist_ok=True)


@dataclass(frozen=True)
class AgentConfig:
    """Settings from the command line; durations in seconds."""

    server: str
    token: str
    workdir: Path
    simulate: str | None = None
    keep_files: bool = False  # keep job dirs, logs and bundles after a job (debugging)
    shutdown_grace_s: float = 10.0  # longest SIGTERM-to-SIGKILL wait when the agent stops
    cache_max_bytes: int | None = None  # input cache cap, bytes (None: $E31_AGENT_CACHE_MAX_BYTES or 50 GB)
    file_roots: tuple[Path, ...] = ()  # where file:// inputs may come from (empty: $E31_AGENT_FILE_ROOTS)
    allow_hosts: tuple[str, ...] = ()  # non-public hosts/CIDRs http(s) inputs may reach (empty: $E31_AGENT_ALLOW_HOSTS)
    extract_limits: Any = None  # extract.ExtractLimits (None: from $E31_AGENT_EXTRACT_MAX_*)
    output_limits: Any = None  # packer.OutputLimits (None: from $E31_AGENT_OUTPUT_MAX_*)
    job_user: str | None = None  # run commands as this user (only when the agent runs as root)
    job_nofile: int = 65536  # RLIMIT_NOFILE of every job
    retry_max_s: float = 30.0  # longest backoff between retries of a call (protocol: 30 s)
    sample_interval_s: float = 5.0  # seconds between a running job's usage samples (charts); 0: none
    unsafe_no_sandbox: bool = False  # jobs without the tenant sandbox (e31_agent.sandbox); the server marks the node
    slot_uids: tuple[int, int] = (2310000, 2319999)  # slot users' uids (agent as root), inclusive
    # networks no job may reach (besides this host's addresses): sandbox.DEFAULT_DENY, metadata and private
    sandbox_deny: tuple[str, ...] = ("169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                     "100.64.0.0/10")
