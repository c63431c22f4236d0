from django.contrib import admin

from .models import AccountUsage, GpuRate, Lease, LeaseGpu, SchedulerCycle


@admin.register(GpuRate)
class GpuRateAdmin(admin.ModelAdmin):
    """Rates per GPU model with history: add a row with a later ``valid_from`` to change a price."""

    list_display = ["gpu_model", "rate_per_gpu_hour", "valid_from"]
    list_filter = ["gpu_model"]


class LeaseGpuInline(admin.TabularInline):
    model = LeaseGpu
    extra = 0
    readonly_fields = ["gpu", "open"]


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "attempt", "node", "gpu_count", "gpu_model", "rented_at", "run_ended_at",
                    "released_at", "billed_seconds", "cost", "charged"]
    list_filter = ["gpu_model", "charged", "end_reason"]
    readonly_fields = [f.name for f in Lease._meta.fields]
    inlines = [LeaseGpuInline]


@admin.register(AccountUsage)
class AccountUsageAdmin(admin.ModelAdmin):
    """Decayed GPU-seconds per account (fair share) and its last run times (prediction)."""

    list_display = ["owner", "decayed_gpu_seconds", "updated_at", "recent_runtimes_s"]
    readonly_fields = ["owner", "decayed_gpu_seconds", "updated_at", "recent_runtimes_s"]


@admin.register(SchedulerCycle)
class SchedulerCycleAdmin(admin.ModelAdmin):
    """Scheduling cycles: when, policy, how long, queue size, jobs placed."""

    list_display = ["at", "policy", "milliseconds", "queued", "placed"]
    list_filter = ["policy"]
    readonly_fields = ["at", "policy", "seconds", "queued", "placed"]

    @admin.display(description="cycle time (ms)", ordering="seconds")
    def milliseconds(self, obj: SchedulerCycle) -> str:
        return f"{obj.seconds * 1000:.1f}"

    def has_add_permission(self, request) -> bool:
        return False
