from django.contrib import admin

from apps.core.admin import LedgerAdmin

from .models import AccountUsage, SchedulerCycle


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
