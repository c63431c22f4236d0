"""Webhooks in the admin: read-only, never the secret (not even encrypted)."""
from django.contrib import admin

from .models import Webhook, WebhookDelivery


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "url", "active", "created_by", "created_at")
    list_filter = ("active",)
    search_fields = ("project__name", "url")
    fields = ("project", "url", "events", "active", "created_by", "created_at")
    readonly_fields = ("project", "url", "events", "created_by", "created_at")

    def has_add_permission(self, request) -> bool:
        return False  # registered by project owners (the API), which shows the secret once


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ("delivery_id", "webhook", "event", "status", "attempts", "last_status_code", "created_at")
    list_filter = ("status", "event")
    search_fields = ("delivery_id", "webhook__project__name")
    readonly_fields = ("webhook", "delivery_id", "event", "dedupe_key", "payload", "status", "attempts",
                       "next_try_at", "last_status_code", "last_error", "delivered_at", "created_at")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
