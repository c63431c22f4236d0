"""Admin building blocks shared by the apps, and the account settings admin."""
from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import AccountProfile


class LedgerAdmin:
    """Mixin for a model admin over a ledger (jobs, leases, events, bundles, usage).

    A ledger row is written only by the services that own its state machine,
    so the admin may list and view it but never add, edit or delete it; an
    operator acts through admin actions that call those services. Put it
    first among the bases: ``class JobAdmin(LedgerAdmin, admin.ModelAdmin)``.
    """

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AccountProfile)
class AccountProfileAdmin(admin.ModelAdmin):
    """Per account: time zone and monthly spend limit (USD per calendar month of that zone)."""

    list_display = ["owner", "time_zone", "monthly_spend_limit", "user_spend_limit", "alert_threshold_percent"]
    search_fields = ["owner__username"]
    autocomplete_fields = ["owner"]
