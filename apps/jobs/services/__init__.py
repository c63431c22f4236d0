"""Writes to jobs (SPEC §3), one module per job: :mod:`.submit`, :mod:`.cancel`, :mod:`.attempts`
(the one owner of an attempt, from the agent's accept to the release, and heartbeats),
:mod:`.recovery` (node loss), :mod:`.time_limits` (time limits enforced by the server), :mod:`.logs`
(log storage) and :mod:`.usage` (what a released job feeds the fair-share ledger). Import each name
from its module.

Views, the API, tasks and the agent protocol (:mod:`apps.agent_api.reports`) call these; none of
them changes a job any other way. Reads are in :mod:`apps.jobs.selectors`.
"""
