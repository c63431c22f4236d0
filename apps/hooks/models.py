"""Project webhooks (issue 25 item 6, SPEC "Webhooks"): HTTPS endpoints told of job events.

A :class:`Webhook` belongs to a project and lists the events it wants (:class:`Event`). Each event of a
job of the project makes one :class:`WebhookDelivery` per matching webhook, in the transaction that
changed the job (:mod:`apps.hooks.events`); the side queue sends it (:mod:`apps.hooks.delivery`), retried
with backoff for a day. The signing secret is stored encrypted with the site's secrets key
(:mod:`apps.secrets.crypto`) and shown once, at creation.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Event(models.TextChoices):
    """What a webhook may subscribe to."""

    QUEUED = "queued", "job queued"  # submitted, or requeued for another attempt
    RUNNING = "running", "job running"  # an attempt's command started
    RELEASED = "released", "job released"  # any outcome, with its reason
    ARRAY_FINISHED = "array_finished", "array finished"  # every task of a job array released


class Webhook(models.Model):
    """An HTTPS endpoint of a project. ``secret_token`` is the Fernet token of the HMAC secret."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, help_text="Event names (queued, running, released, array_finished).")
    secret_token = models.BinaryField(help_text="The signing secret, encrypted (Fernet); shown once, at creation.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField()
    active = models.BooleanField(default=True, help_text="Off: no new deliveries are made (pending ones stop).")

    class Meta:
        ordering = ["project", "id"]
        indexes = [models.Index(fields=["project", "active"])]

    def __str__(self) -> str:
        return f"webhook {self.pk} of {self.project_id} to {self.url}"


class DeliveryStatus(models.TextChoices):
    """Where a delivery stands; written by :mod:`apps.hooks.delivery` only."""

    PENDING = "pending", "pending"  # to be sent at next_try_at (first try or a retry)
    DELIVERED = "delivered", "delivered"  # a 2xx answer
    FAILED = "failed", "failed"  # given up after a day of retries (or its webhook was deleted)


class WebhookDelivery(models.Model):
    """One event for one webhook. ``delivery_id`` is sent as ``E31-Webhook-Id`` on every try, so a
    receiver drops a retry it already handled. ``dedupe_key`` names the event (``job:41:running:1``)
    so a job's event makes one delivery per webhook however often the job's signals repeat."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event = models.CharField(max_length=16, choices=Event.choices)
    dedupe_key = models.CharField(max_length=100)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True, help_text=(
        "When the next try is due (a try in flight pushes it past its timeout); empty once done."))
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["webhook", "dedupe_key"], name="webhook_delivery_once")]
        indexes = [models.Index(fields=["status", "next_try_at"]), models.Index(fields=["webhook", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id} ({self.status})"
