from django.contrib import admin

from apps.core.admin import LedgerAdmin

from .models import Bundle, Upload


@admin.register(Upload)
class UploadAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "size_bytes", "created_at"]
    readonly_fields = ["sha256", "size_bytes"]


@admin.register(Bundle)
class BundleAdmin(LedgerAdmin, admin.ModelAdmin):
    list_display = ["job", "attempt", "size_bytes", "received_bytes", "completed_at", "expires_at"]
    readonly_fields = ["files", "sha256", "size_bytes", "received_bytes"]
