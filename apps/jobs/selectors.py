"""Reads of jobs. Every read a user makes goes through one that filters by owner."""
from __future__ import annotations

from django.db.models import QuerySet

from apps.core.choices import JobState

from .models import Job


def jobs_of(user) -> QuerySet[Job]:
    """The user's own jobs, newest first. Anyone else's are simply not there."""
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(owner=user).order_by("-submitted_at", "-id")


def jobs_queued() -> QuerySet[Job]:
    """Queued jobs of everyone, in queue order (position, then submit time)."""
    return Job.objects.filter(state=JobState.QUEUED).order_by("queue_position", "submitted_at", "id")
