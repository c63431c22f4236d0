"""API tokens in the admin: the prefix only, never the key (it is not stored)."""
from django.contrib import admin

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "created_at")
    search_fields = ("prefix", "user__username")
    fields = ("prefix", "user", "created_at")
    readonly_fields = ("prefix", "user", "created_at")

    def has_add_permission(self, request) -> bool:
        return False  # issued with manage.py issue_token, which shows the key once
