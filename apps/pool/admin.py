from django.contrib import admin
from django.utils.html import format_html, format_html_join

from apps.core.admin import LedgerAdmin

from .models import Gpu, Node, NodeDowntime
from .quarantine import gpu_lift_by_operator
from .services import node_set_drain


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = ["index", "uuid", "model", "memory_mb", "present", "quarantine_reason", "quarantined_at"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "drain", "hostname", "cpus", "simulated", "sandboxed", "last_heartbeat_at"]
    list_filter = ["state", "drain", "simulated"]
    readonly_fields = ["state", "hostname", "agent_version", "cpus", "memory_bytes", "disk_bytes", "runtimes",
                       "simulated", "sandboxed", "gpu_health", "registered_at", "last_heartbeat_at"]
    inlines = [GpuInline]
    actions = ["drain_nodes", "undrain_nodes"]

    @admin.display(description="GPU health (last heartbeat)")
    def gpu_health(self, obj: Node) -> str:
        rows = obj.gpu_health()
        if not rows:
            return "–"
        dash = "–"
        body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                "<td>{}</td></tr>", (
            (r["index"], r["uuid"], dash if r["temperature_c"] is None else f"{r['temperature_c']} °C",
             dash if r["utilization_pct"] is None else f"{r['utilization_pct']} %",
             dash if r["ecc_uncorrected"] is None else r["ecc_uncorrected"],
             dash if r["ecc_corrected"] is None else r["ecc_corrected"], r["warning"] or "ok")
            for r in rows))
        return format_html("<table><tr><th>GPU</th><th>UUID</th><th>Temperature</th><th>Utilisation</th>"
                           "<th>ECC uncorrected</th><th>ECC corrected</th><th>Status</th></tr>{}</table>"
                           "<p>{} at {}</p>", body, (obj.health or {}).get("source", ""),
                           (obj.health or {}).get("at", ""))

    @admin.action(description="Drain: keep running jobs, take no new ones")
    def drain_nodes(self, request, queryset):
        for node in queryset:
            node_set_drain(node=node, drain=True)

    @admin.action(description="Stop draining")
    def undrain_nodes(self, request, queryset):
        for node in queryset:
            node_set_drain(node=node, drain=False)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["node", "index", "model", "memory_mb", "uuid", "present", "quarantine_reason", "quarantined_at"]
    list_filter = ["model", "present", ("quarantined_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["quarantine_reason", "quarantined_at"]
    actions = ["lift_quarantine"]

    @admin.action(description="Lift quarantine: take jobs again (a later unclean heartbeat holds it back again)")
    def lift_quarantine(self, request, queryset):
        lifted = sum(gpu_lift_by_operator(gpu=gpu) for gpu in queryset.select_related("node"))
        self.message_user(request, f"{lifted} GPU quarantine{'s' if lifted != 1 else ''} lifted.")


@admin.register(NodeDowntime)
class NodeDowntimeAdmin(LedgerAdmin, admin.ModelAdmin):
    """Spans a node was down (recorded by the pool's loss check), for the operator report."""

    list_display = ["node", "down_at", "up_at", "gpus"]
    list_filter = ["node"]
    readonly_fields = ["node", "down_at", "up_at", "gpus"]
