"""``/api/v1/`` routes of uploads (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import views

urlpatterns = [
    path("uploads/", views.UploadView.as_view(), name="uploads"),
]
