"""``/api/v1/agent/``: the agents' own calls, node token only (docs/agent-protocol.md).

Included by ``e31site/urls.py`` in the ``api`` namespace; the paths are the protocol's and
never change under a running agent.
"""
from django.urls import path

import apps.core.converters  # noqa: F401  (registers <id:...>)

from . import prestage, views

urlpatterns = [
    path("agent/register/", views.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", views.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/work/", views.work_view, name="agent-work"),
    path("agent/jobs/<id:job_id>/report/", views.ReportView.as_view(), name="agent-report"),
    path("agent/reports/", views.ReportBatchView.as_view(), name="agent-reports"),
    path("agent/jobs/<id:job_id>/log/", views.LogView.as_view(), name="agent-log"),
    path("agent/jobs/<id:job_id>/samples/", views.SamplesView.as_view(), name="agent-samples"),
    path("agent/jobs/<id:job_id>/bundle/", views.BundleView.as_view(), name="agent-bundle"),
    path("agent/jobs/<id:job_id>/bundle/direct/", views.BundleDirectView.as_view(), name="agent-bundle-direct"),
    path("agent/jobs/<id:job_id>/bundle/complete/", views.BundleCompleteView.as_view(),
         name="agent-bundle-complete"),
    path("agent/jobs/<id:job_id>/checkpoint/", views.CheckpointFileView.as_view(), name="agent-checkpoint"),
    path("agent/uploads/<uuid:upload_id>/", views.UploadDownloadView.as_view(), name="agent-upload"),
    path("agent/prestage/", prestage.PrestageView.as_view(), name="agent-prestage"),
]
