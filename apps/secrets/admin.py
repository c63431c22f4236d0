"""Secrets in the admin: the name, owner and dates, never the value (not even encrypted)."""
from django.contrib import admin

from .models import Secret


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "created_at", "updated_at")
    search_fields = ("name", "owner__username")
    fields = ("name", "owner", "created_at", "updated_at")
    readonly_fields = ("name", "owner", "created_at", "updated_at")

    def has_add_permission(self, request) -> bool:
        return False  # set by their owners (API, settings page, `e31 secret set`)

    def has_change_permission(self, request, obj=None) -> bool:
        return False
