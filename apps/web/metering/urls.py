"""Browser pages of the meter. Mounted at ``/usage/``."""
from django.urls import path

import apps.core.converters  # noqa: F401  (registers <id:...>)
from apps.web.metering import views

app_name = "metering"
urlpatterns = [
    path("", views.usage, name="usage"),
    path("csv/", views.usage_csv, name="usage_csv"),
    path("report/", views.report, name="report"),
    path("report/csv/", views.report_csv, name="report_csv"),
    path("receipts/<id:job_id>/", views.receipt, name="receipt"),
]
