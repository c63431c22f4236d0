"""Projects in the admin: operators set a project's fair share and spend limit, and each member's
share within it (issue 25 item 1); members are added by their owners and admins (API, CLI)."""
from django.contrib import admin

from .models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role", "share", "service", "added_at")
    readonly_fields = ("user", "role", "service", "added_at")

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # owners and admins add members (they choose whom to trust)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "personal_of", "share", "spend_limit", "budget", "created_at")
    search_fields = ("name", "memberships__user__username")
    list_filter = (("personal_of", admin.EmptyFieldListFilter),)
    fields = ("name", "personal_of", "share", "spend_limit", "budget", "alert_percent", "created_at")
    readonly_fields = ("name", "personal_of", "budget", "created_at")
    inlines = [MembershipInline]

    def has_add_permission(self, request) -> bool:
        return False  # any user makes one (API, CLI); a personal one is made when first needed

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # its jobs and bills keep it
