"""Notice settings page. Mounted at ``/notices/``."""
from django.urls import path

from apps.web.notices import views

app_name = "notices"
urlpatterns = [
    path("", views.notice_settings, name="settings"),
]
