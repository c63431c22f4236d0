"""Factories for the browser tests: users, a node with GPUs, jobs in each step of their life."""
from __future__ import annotations

from ..drive import Agent, finished_job, queued_job, rented_job, spec_doc
from ..factories import PASSWORD, UserFactory, node_with_gpus

# Users and nodes come from the shared factories; jobs in each step from tests/drive.py, through the services.
__all__ = ["PASSWORD", "Agent", "UserFactory", "finished_job", "node_with_gpus", "queued_job", "rented_job",
           "spec_doc"]
