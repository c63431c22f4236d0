from django.contrib import admin

from .models import Job, JobArray, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["seq", "at", "from_state", "to_state", "detail"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "state", "outcome", "gpus_per_node", "nodes", "queue_position",
                    "submitted_at", "rented_at", "released_at"]
    list_filter = ["state", "outcome", "kind"]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["state", "outcome", "spec", "submitted_at", "rented_at", "run_started_at", "run_ended_at",
                       "released_at", "exit_code", "attempt", "event_seq", "queue_position",
                       "estimated_start_at", "pending_reason", "array", "array_index"]
    inlines = [JobEventInline]


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["job", "seq", "at", "from_state", "to_state", "detail"]
    readonly_fields = ["job", "seq", "at", "from_state", "to_state", "detail"]


@admin.register(JobArray)
class JobArrayAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "size", "submitted_at", "cancel_requested_at"]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["owner", "name", "size", "spec", "submitted_at", "cancel_requested_at"]
