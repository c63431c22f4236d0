"""``/api/v1/`` routes of secrets (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import views

urlpatterns = [
    path("secrets/", views.SecretListView.as_view(), name="secret-list"),
    path("secrets/<str:name>/", views.SecretDetailView.as_view(), name="secret-detail"),
    path("projects/<str:name>/secrets/", views.ProjectSecretListView.as_view(), name="project-secrets"),
    path("projects/<str:name>/secrets/<str:secret>/", views.ProjectSecretDetailView.as_view(),
         name="project-secret"),
]
