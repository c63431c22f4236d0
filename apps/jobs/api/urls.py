"""``/api/v1/`` routes of jobs and job arrays (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

import apps.core.converters  # noqa: F401  (registers <id:...>, <filepath:...>)

from . import metrics, views

urlpatterns = [
    path("jobs/", views.JobListCreateView.as_view(), name="job-list"),
    path("jobs/cancel/", views.JobBulkCancelView.as_view(), name="job-cancel-bulk"),
    path("jobs/<id:pk>/", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<id:pk>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("jobs/<id:pk>/rerun/", views.JobRerunView.as_view(), name="job-rerun"),
    path("jobs/<id:pk>/events/", views.JobEventsView.as_view(), name="job-events"),
    path("jobs/<id:pk>/logs/", views.JobLogsView.as_view(), name="job-logs"),
    path("jobs/<id:pk>/metrics/", metrics.JobMetricsView.as_view(), name="job-metrics"),
    path("jobs/<id:pk>/bundle/", views.JobBundleView.as_view(), name="job-bundle"),
    path("jobs/<id:pk>/files/", views.JobFilesView.as_view(), name="job-files"),
    path("jobs/<id:pk>/files/<filepath:path>", views.JobFileView.as_view(), name="job-file"),
    path("arrays/", views.ArrayListView.as_view(), name="array-list"),
    path("arrays/<id:pk>/", views.ArrayDetailView.as_view(), name="array-detail"),
    path("arrays/<id:pk>/cancel/", views.ArrayCancelView.as_view(), name="array-cancel"),
]
