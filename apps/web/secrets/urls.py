"""The user's secrets page (issue 23). Mounted at ``/account/secrets/``."""
from django.urls import path

from apps.web.secrets import views

app_name = "secrets"
urlpatterns = [
    path("", views.secrets_page, name="list"),
    path("<str:name>/delete/", views.secret_delete_view, name="delete"),
]
