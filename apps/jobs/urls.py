"""Browser pages of jobs (SPEC §7). Mounted at the site root."""
from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("jobs/new/", views.job_new, name="new"),
    path("jobs/new/estimate/", views.job_estimate, name="estimate"),
    path("jobs/<int:pk>/", views.job_detail, name="detail"),
    path("jobs/<int:pk>/log/", views.job_log, name="log"),
    path("jobs/<int:pk>/bundle/", views.job_bundle, name="bundle"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_view, name="cancel"),
    path("arrays/<int:pk>/", views.array_detail, name="array"),
    path("arrays/<int:pk>/cancel/", views.array_cancel_view, name="array-cancel"),
]
