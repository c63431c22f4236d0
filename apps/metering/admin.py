from django.contrib import admin

from apps.core.admin import LedgerAdmin

from .models import GpuRate, Lease, LeaseGpu


@admin.register(GpuRate)
class GpuRateAdmin(admin.ModelAdmin):
    """Rates per GPU model with history: add a row with a later ``valid_from`` to change a price."""

    list_display = ["gpu_model", "rate_per_gpu_hour", "valid_from"]
    list_filter = ["gpu_model"]


class LeaseGpuInline(LedgerAdmin, admin.TabularInline):
    model = LeaseGpu
    extra = 0
    readonly_fields = ["gpu", "open"]


@admin.register(Lease)
class LeaseAdmin(LedgerAdmin, admin.ModelAdmin):
    """Leases, read-only: the meter is written by the lease services alone."""

    list_display = ["id", "job", "attempt", "node", "gpu_count", "gpu_model", "rented_at", "run_ended_at",
                    "released_at", "billed_seconds", "cost", "charged"]
    list_filter = ["gpu_model", "charged", "end_reason"]
    readonly_fields = [f.name for f in Lease._meta.fields]
    inlines = [LeaseGpuInline]
