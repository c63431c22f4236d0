from django.contrib import admin

from .models import Gpu, Node
from .services import node_set_drain


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = ["index", "uuid", "model", "memory_mb", "present"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "drain", "hostname", "cpus", "simulated", "last_heartbeat_at"]
    list_filter = ["state", "drain", "simulated"]
    readonly_fields = ["state", "hostname", "agent_version", "cpus", "memory_bytes", "disk_bytes", "runtimes",
                       "simulated", "health", "registered_at", "last_heartbeat_at"]
    inlines = [GpuInline]
    actions = ["drain_nodes", "undrain_nodes"]

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
    list_display = ["node", "index", "model", "memory_mb", "uuid", "present"]
    list_filter = ["model", "present"]
