"""Who the kernel's OOM killer takes first (issue 26 item 5): the job, never the agent or its shims.

``/proc/<pid>/oom_score_adj`` runs from -1000 (never killed) to +1000 (killed first;
Documentation/filesystems/proc.rst). The agent and every shim set theirs to :data:`SUPERVISOR`
(lowering it needs ``CAP_SYS_RESOURCE``: as root only, else left as it is); a job's command starts
at :data:`JOB` (any process may raise its own), which all it forks inherits.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

SUPERVISOR = -1000
JOB = 500


def oom_score_adj_set(value: int, pid: int | str = "self") -> bool:
    """Write ``value`` to ``pid``'s ``oom_score_adj``; False where the kernel refuses (not root)."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as fh:
            fh.write(str(value))
        return True
    except OSError as exc:
        log.debug("oom_score_adj %s for %s refused: %s", value, pid, exc)
        return False


def protect_supervisor() -> bool:
    """Make this process (the agent, a shim) the OOM killer's last choice, as root."""
    return os.geteuid() == 0 and oom_score_adj_set(SUPERVISOR)
