"""Fair share by project, then by user within it: Slurm's Fair Tree (issue 25 item 4).

Slurm, "Fair Tree Fairshare Algorithm", https://slurm.schedmd.com/fair_tree.html. Here the tree
has two levels under the root: projects, and each project's users. At each level every node gets
its *level fairshare* ``LF = S / U``: ``S`` its share normalised over its siblings
(``share / sum of the siblings' shares``: ``Project.share`` among projects, ``Membership.share``
among a project's users) and ``U`` its decayed usage normalised over its siblings' (``usage / sum
of the siblings' usage``; GPU-seconds decayed with the fair-share half-life, the same ledger as
:class:`~.priority.UsageLedger`). ``LF`` is infinite for a node with no usage and 0 for one
with no share. Projects are sorted by ``LF``, highest first, and visited depth first: every
user of a project ranked higher ranks above every user of a project ranked lower, whatever the
users' own usage. Ties are allowed, as Slurm's: sibling projects of equal ``LF`` have their
users sorted together, and users of equal ``LF`` share one rank (the next rank down skips the
tied ones).

The factor's value, in (0, 1]: Slurm gives the ``r``-th of ``n`` users from the bottom
``r / n``. Here the projects are ranked so (``R`` of ``P`` projects, from the bottom) and each
project's slot ``((R - 1) / P, R / P]`` is split among its ``m`` users by their rank ``r_u``
within it: ``factor = (R - 1 + r_u / m) / P`` (a tie group of ``k`` projects takes ``k`` slots:
``(R - k + k * r_u / m) / P``, ``R`` its top). The order is Slurm's exactly, and with one user
per project (personal projects only) so is the value, ``R / P``. The gap between two projects is
then one project's slot, ``1 / P``, however many users they have: with Slurm's ``r / n`` a
project of ten users beside one of one would leave a gap of ``1 / 11`` between the one's user
and the ten's best, which the other factors of the priority (age, slowdown, size, at the same
weights) would drown.

The tree holds every project and user with usage or a queued job (the accounts today's classic
factor counts). A job without a project belongs to its owner's personal project, a project of
one: its tree key is :func:`tree_project` (``"~" + account``), and its usage is kept under the
owner alone (:func:`usage_key`), so a site with personal projects only has one user per project
and orders accounts by ``share / usage`` exactly as the classic factor ``2 ** (-U / S)`` does
(equal shares: by usage), only the factor's values differ (ranks instead of powers of two).
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


def _tied(levels: Mapping[str, float]) -> list[list[str]]:
    """The keys grouped by equal level fairshare, highest first (ties keep key order)."""
    groups: dict[float, list[str]] = {}
    for key in sorted(levels):
        groups.setdefault(levels[key], []).append(key)
    return [groups[lf] for lf in sorted(groups, reverse=True)]


def fairtree_factors(queue: Iterable[JobRequest], usage: Mapping[str, float] | None,
                     shares: FairShares | None = None) -> dict[str, float]:
    """Fair-tree factor, in (0, 1], of every association (:func:`usage_key`) in the tree: those
    of the queue and those with usage (see the module docstring).

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
    project_level = _level({p: shares.projects.get(p, 1.0) for p in members}, project_usage)
    n_projects, rank, out = len(members), len(members), {}
    for tied_projects in _tied(project_level):
        # Sibling projects of equal LF: their users are sorted together (fair_tree.html, "Ties").
        user_level: dict[str, float] = {}
        for p in tied_projects:
            user_level.update(_level(members[p], usage))
        k, m, user_rank = len(tied_projects), len(user_level), len(user_level)
        for tied_users in _tied(user_level):
            for key in tied_users:
                out[key] = (rank - k + k * user_rank / m) / n_projects
            user_rank -= len(tied_users)
        rank -= k
    return out
