"""Fair share by project, then by user within it: Slurm's Fair Tree order with the classic value (issue 25 item 4).

The tree has two levels under the root: projects, and each project's users (Slurm, "Fair Tree
Fairshare Algorithm", https://slurm.schedmd.com/fair_tree.html). The *order* is the Fair Tree's:
projects are sorted by their level fairshare ``LF = S / U``, highest first, and every user of a
project ranked higher ranks above every user of a project ranked lower, whatever the users' own
usage; within a project its users are sorted by their own ``LF``. ``S`` is a node's share
normalised over its siblings (``share / sum of the siblings' shares``: ``Project.share`` among
projects, ``Membership.share`` among a project's users) and ``U`` its decayed usage normalised
over its siblings' (``usage / sum of the siblings' usage``; GPU-seconds decayed with the
fair-share half-life, the same ledger as :class:`~.priority.UsageLedger`). ``LF`` is infinite for
a node with no usage and 0 for one with no share.

The *value* of the factor, in [0, 1], is not the Fair Tree's rank ``r / n``. A project's value is
Slurm's classic factor of the project, ``V = 2 ** (-U / S)`` (priority/multifactor,
https://slurm.schedmd.com/priority_multifactor.html; 1 for a project with no usage, 0 for one
with no share); the code sorts projects by ``V``, which falls as ``U / S`` rises, so in the order
of ``LF`` (two projects so far over their shares that ``V`` is 0 for both tie). The project's
users split the slot between its value and the value of the next project below (``V_below``, 0
for the lowest) by their rank ``r`` of ``m`` within the project (from the bottom; users of equal
``LF`` share the top rank of their group, so the next rank down skips them):
``factor = V_below + (V - V_below) * r / m``. So the project's best user gets ``V`` exactly, and
every user of a project lies above every user of a lower project, as the Fair Tree orders them.
Ties are Slurm's: sibling projects of equal ``V`` have their users sorted together (``m``: all of
their users).

Why the classic value and not the rank (measured, docs/benchmarks-scheduler.md, "Fair share by
project: the classic value and the starved order"): a project of one user gets ``V``, which is the
classic factor of that user, so a site of personal projects only (the SWF replays: KTH-SP2's groups
are nearly its users) orders *and* weighs accounts exactly as ``fairshare="classic"`` does. The
rank spreads light accounts evenly over (0, 1] where the classic factor leaves them together near
1, and cost KTH-SP2 0.93x EASY's mean bounded slowdown against 0.80x, and a 9+ GPU tail of 313,269
s against 262,902 s; with the classic value the tree gives 0.81x and 262,902 s there. A project's
value depends on the project's usage and share only, never on how many users it has: a project of
ten users gets one value, as a project of one does, and its other users fall below its best one, so
ten users cannot outrank a one-user project by being ten (with Slurm's ``r / n`` over all users the
ten would also take ten of the eleven ranks).

The tree holds every project and user with usage or a queued job (the accounts the classic factor
counts). A job without a project belongs to its owner's personal project, a project of one: its
tree key is :func:`tree_project` (``"~" + account``), and its usage is kept under the owner alone
(:func:`usage_key`), so a site with personal projects only and equal shares gets
:func:`~.priority.fairshare_factor` of every account, to the last bit.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from .types import FairShares, JobRequest

PERSONAL = "~"  # a personal project's tree key is this prefix and the account
SEPARATOR = "/"  # usage of a user in a named project is kept under "project/account"


def usage_key(project: str, account: str) -> str:
    """The fair-share ledger's key of ``account`` in ``project``: the account alone for its
    personal project (``project`` empty), else ``"project/account"``. Accounts and project keys
    hold no ``/``."""
    return f"{project}{SEPARATOR}{account}" if project else account


def split_key(key: str) -> tuple[str, str]:
    """``(project, account)`` of a :func:`usage_key` (project empty: the personal one)."""
    project, sep, account = key.rpartition(SEPARATOR)
    return (project, account) if sep else ("", key)


def tree_project(project: str, account: str) -> str:
    """The tree node of ``account``'s ``project``: the project key, or ``"~account"`` for the
    personal project (empty ``project``)."""
    return project or f"{PERSONAL}{account}"


def job_usage_key(job: JobRequest) -> str:
    """:func:`usage_key` of a queued job: its (project, owner) association."""
    return usage_key(job.project, job.account)


def _level(shares: Mapping[str, float], usage: Mapping[str, float]) -> dict[str, float]:
    """``LF = S / U`` of each sibling (keys of ``shares``), normalised over the siblings."""
    total_share = sum(max(s, 0.0) for s in shares.values())
    total_usage = sum(max(usage.get(k, 0.0), 0.0) for k in shares)
    out = {}
    for key, share in shares.items():
        s = max(share, 0.0) / total_share if total_share > 0 else 0.0
        u = max(usage.get(key, 0.0), 0.0) / total_usage if total_usage > 0 else 0.0
        out[key] = 0.0 if s <= 0 else (math.inf if u <= 0 else s / u)
    return out


def _classic(shares: Mapping[str, float], usage: Mapping[str, float]) -> dict[str, float]:
    """Slurm's classic factor ``2 ** (-U / S)`` of each sibling (keys of ``shares``), ``U`` and
    ``S`` normalised over the siblings: 1 with no usage, 0 with no share. Written as
    :func:`~.priority.fairshare_factor` computes it (``U * (total share / share)``), so equal
    shares give its values bit for bit."""
    total_share = sum(max(s, 0.0) for s in shares.values())
    total_usage = sum(max(usage.get(k, 0.0), 0.0) for k in shares)
    out = {}
    for key, share in shares.items():
        used = max(usage.get(key, 0.0), 0.0)
        if share <= 0:
            out[key] = 0.0
        elif used <= 0 or total_usage <= 0:
            out[key] = 1.0
        else:
            out[key] = math.pow(2.0, -(used / total_usage) * (total_share / share))
    return out


def _tied(levels: Mapping[str, float]) -> list[list[str]]:
    """The keys grouped by equal value, highest first (ties keep key order)."""
    groups: dict[float, list[str]] = {}
    for key in sorted(levels):
        groups.setdefault(levels[key], []).append(key)
    return [groups[lf] for lf in sorted(groups, reverse=True)]


def fairtree_factors(queue: Iterable[JobRequest], usage: Mapping[str, float] | None,
                     shares: FairShares | None = None) -> dict[str, float]:
    """Fair-share factor, in [0, 1], of every association (:func:`usage_key`) in the tree: those
    of the queue and those with usage. Fair Tree order, each project valued by the classic factor
    and its users ranked within it (see the module docstring).

    Args:
        queue: the queued jobs; each job's association is (``project``, ``account``).
        usage: ``{usage key: decayed GPU-seconds}``.
        shares: project and member shares (missing ones count 1); None: all equal.
    """
    usage = usage or {}
    shares = shares or FairShares()
    members: dict[str, dict[str, float]] = {}  # tree project -> {usage key: member share}
    for key in [*(job_usage_key(j) for j in queue), *(k for k, v in usage.items() if v > 0)]:
        project, account = split_key(key)
        members.setdefault(tree_project(project, account), {})[key] = shares.users.get(key, 1.0)
    if not members:
        return {}
    project_usage = {p: sum(usage.get(k, 0.0) for k in m) for p, m in members.items()}
    value = _classic({p: shares.projects.get(p, 1.0) for p in members}, project_usage)
    groups = _tied(value)
    out = {}
    for i, tied_projects in enumerate(groups):
        top = value[tied_projects[0]]
        below = value[groups[i + 1][0]] if i + 1 < len(groups) else 0.0
        # Sibling projects of equal value: their users are sorted together (fair_tree.html, "Ties").
        user_level: dict[str, float] = {}
        for p in tied_projects:
            user_level.update(_level(members[p], usage))
        m = user_rank = len(user_level)
        for tied_users in _tied(user_level):
            for key in tied_users:
                out[key] = below + (top - below) * user_rank / m
            user_rank -= len(tied_users)
    return out
