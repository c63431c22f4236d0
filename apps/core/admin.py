"""Admin building blocks shared by the apps."""
from __future__ import annotations

from django.http import HttpRequest


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
