"""``/api/v1/``: the user API and the agent's calls."""
from django.urls import path

import e31site.converters  # noqa: F401  (registers <id:...>)
from apps.pool.api import nodes as pool_nodes
from apps.pool.api import prestage as agent_prestage
from apps.pool.api import views as agent

from . import views

app_name = "api"

urlpatterns = [
    path("jobs/", views.JobListCreateView.as_view(), name="job-list"),
    path("jobs/<id:pk>/", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<id:pk>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("jobs/<id:pk>/rerun/", views.JobRerunView.as_view(), name="job-rerun"),
    path("jobs/<id:pk>/events/", views.JobEventsView.as_view(), name="job-events"),
    path("jobs/<id:pk>/logs/", views.JobLogsView.as_view(), name="job-logs"),
    path("jobs/<id:pk>/bundle/", views.JobBundleView.as_view(), name="job-bundle"),
    path("arrays/", views.ArrayListView.as_view(), name="array-list"),
    path("arrays/<id:pk>/", views.ArrayDetailView.as_view(), name="array-detail"),
    path("arrays/<id:pk>/cancel/", views.ArrayCancelView.as_view(), name="array-cancel"),
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("pool/", views.PoolView.as_view(), name="pool"),
    path("nodes/", pool_nodes.NodeListView.as_view(), name="node-list"),
    path("uploads/", views.UploadView.as_view(), name="uploads"),
    # The agent's own calls: node token only (docs/agent-protocol.md).
    path("agent/register/", agent.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", agent.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/work/", agent.work_view, name="agent-work"),
    path("agent/jobs/<id:job_id>/report/", agent.ReportView.as_view(), name="agent-report"),
    path("agent/reports/", agent.ReportBatchView.as_view(), name="agent-reports"),
    path("agent/jobs/<id:job_id>/log/", agent.LogView.as_view(), name="agent-log"),
    path("agent/jobs/<id:job_id>/bundle/", agent.BundleView.as_view(), name="agent-bundle"),
    path("agent/jobs/<id:job_id>/bundle/complete/", agent.BundleCompleteView.as_view(),
         name="agent-bundle-complete"),
    path("agent/uploads/<uuid:upload_id>/", agent.UploadDownloadView.as_view(), name="agent-upload"),
    path("agent/prestage/", agent_prestage.PrestageView.as_view(), name="agent-prestage"),
]
