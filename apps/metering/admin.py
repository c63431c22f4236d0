from django.contrib import admin

from apps.core.admin import LedgerAdmin

from .models import AccountProfile, AccountUsage, GpuRate, Lease, LeaseGpu, NodeDowntime, SchedulerCycle


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


@admin.register(AccountUsage)
class AccountUsageAdmin(LedgerAdmin, admin.ModelAdmin):
    """Decayed GPU-seconds per account (fair share) and its last run times (prediction)."""

    list_display = ["owner", "decayed_gpu_seconds", "updated_at", "recent_runtimes_s"]
    readonly_fields = ["owner", "decayed_gpu_seconds", "updated_at", "recent_runtimes_s"]


@admin.register(SchedulerCycle)
class SchedulerCycleAdmin(LedgerAdmin, admin.ModelAdmin):
    """Scheduling cycles: when, policy, how long, queue size, jobs placed."""

    list_display = ["at", "policy", "milliseconds", "queued", "placed"]
    list_filter = ["policy"]
    readonly_fields = ["at", "policy", "seconds", "queued", "placed"]

    @admin.display(description="cycle time (ms)", ordering="seconds")
    def milliseconds(self, obj: SchedulerCycle) -> str:
        return f"{obj.seconds * 1000:.1f}"


@admin.register(AccountProfile)
class AccountProfileAdmin(admin.ModelAdmin):
    """Per account: time zone and monthly spend limit (USD per calendar month of that zone)."""

    list_display = ["owner", "time_zone", "monthly_spend_limit"]
    search_fields = ["owner__username"]
    autocomplete_fields = ["owner"]


@admin.register(NodeDowntime)
class NodeDowntimeAdmin(LedgerAdmin, admin.ModelAdmin):
    """Spans a node was down (recorded by the pool's loss check), for the operator report."""

    list_display = ["node", "down_at", "up_at", "gpus"]
    list_filter = ["node"]
    readonly_fields = ["node", "down_at", "up_at", "gpus"]
