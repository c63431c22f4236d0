from django.contrib import admin, messages
from e31_protocol.redact import redact_value

from apps.core.admin import LedgerAdmin
from apps.jobs.services.cancel import job_cancel

from .models import Job, JobArray, JobDependency, JobEvent


class JobEventInline(LedgerAdmin, admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["seq", "at", "from_state", "to_state", "detail"]


class JobDependencyInline(LedgerAdmin, admin.TabularInline):
    """The job's ``after`` entries (issue 25 item 7), read-only: written at submit."""

    model = JobDependency
    fk_name = "job"
    extra = 0
    can_delete = False
    readonly_fields = ["index", "on_job", "on_array", "when"]


@admin.register(Job)
class JobAdmin(LedgerAdmin, admin.ModelAdmin):
    """Jobs, read-only: states change only through the job services (cancel is an action here)."""

    list_display = ["id", "name", "owner", "project", "state", "outcome", "gpus_per_node", "nodes", "queue_position",
                    "submitted_at", "rented_at", "released_at"]
    list_select_related = ["owner", "project"]
    list_filter = ["state", "outcome", "kind"]
    search_fields = ["name", "owner__username", "project__name"]
    exclude = ["spec"]  # shown as shown_spec: a URL's userinfo and signature as *** (issue 23)
    readonly_fields = ["state", "outcome", "shown_spec", "submitted_at", "rented_at", "run_started_at", "run_ended_at",
                       "released_at", "exit_code", "attempt", "event_seq", "queue_position",
                       "estimated_start_at", "latest_start_at", "pending_reason", "array", "array_index"]
    inlines = [JobDependencyInline, JobEventInline]
    actions = ["cancel_jobs"]

    @admin.display(description="spec")
    def shown_spec(self, job: Job) -> object:
        return redact_value(job.spec)

    @admin.action(description="Cancel: stop the run (billed to the stop) or drop from the queue")
    def cancel_jobs(self, request, queryset):
        for job in queryset:
            job_cancel(job=job, by=request.user)
        self.message_user(request, f"Cancel asked for {queryset.count()} job(s).", messages.SUCCESS)

    def get_actions(self, request):
        # The ledger mixin forbids "change", which would hide every action; cancelling goes
        # through job_cancel, which is the operator's right as staff.
        actions = super().get_actions(request)
        if request.user.is_staff:
            actions["cancel_jobs"] = self.get_action("cancel_jobs")
        return actions


@admin.register(JobEvent)
class JobEventAdmin(LedgerAdmin, admin.ModelAdmin):
    list_display = ["job", "seq", "at", "from_state", "to_state", "detail"]
    readonly_fields = ["job", "seq", "at", "from_state", "to_state", "detail"]


@admin.register(JobArray)
class JobArrayAdmin(LedgerAdmin, admin.ModelAdmin):
    list_display = ["id", "name", "owner", "project", "size", "submitted_at", "cancel_requested_at"]
    search_fields = ["name", "owner__username", "project__name"]
    exclude = ["spec"]
    readonly_fields = ["owner", "name", "size", "shown_spec", "submitted_at", "cancel_requested_at"]

    @admin.display(description="spec")
    def shown_spec(self, array: JobArray) -> object:
        return redact_value(array.spec)
