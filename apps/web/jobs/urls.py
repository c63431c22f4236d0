"""Browser pages of jobs (SPEC §7). Mounted at the site root."""
from django.urls import path

import apps.core.converters  # noqa: F401  (registers <id:...>, <filepath:...>)
from apps.web.jobs import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("jobs/new/", views.job_new, name="new"),
    path("jobs/cancel/", views.job_cancel_bulk_view, name="cancel-bulk"),
    path("jobs/new/estimate/", views.job_estimate, name="estimate"),
    path("jobs/<id:pk>/", views.job_detail, name="detail"),
    path("jobs/<id:pk>/log/", views.job_log, name="log"),
    path("jobs/<id:pk>/log/lines/", views.job_log_lines, name="log-lines"),
    path("jobs/<id:pk>/bundle/", views.job_bundle, name="bundle"),
    path("jobs/<id:pk>/files/<filepath:path>", views.job_file, name="file"),
    path("jobs/<id:pk>/download/<filepath:path>", views.job_file_download, name="file-download"),
    path("jobs/<id:pk>/cancel/", views.job_cancel_view, name="cancel"),
    path("jobs/<id:pk>/rerun/", views.job_rerun_view, name="rerun"),
    path("arrays/<id:pk>/", views.array_detail, name="array"),
    path("arrays/<id:pk>/cancel/", views.array_cancel_view, name="array-cancel"),
]
