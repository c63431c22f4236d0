"""The user's own Settings page and its account forms. Mounted at ``/account/``."""
from django.urls import path

from apps.web.account import views as account_views
from apps.web.metering import views

app_name = "account"
urlpatterns = [
    path("settings/", views.account_settings, name="settings"),
    path("tokens/new/", account_views.token_new, name="token-new"),
    path("tokens/<int:token_id>/revoke/", account_views.token_delete, name="token-revoke"),
    path("password/", account_views.password_change, name="password"),
    path("email/", account_views.email_change, name="email"),
]
