"""The user's own settings page. Mounted at ``/account/``."""
from django.urls import path

from apps.web.metering import views

app_name = "account"
urlpatterns = [
    path("settings/", views.account_settings, name="settings"),
]
