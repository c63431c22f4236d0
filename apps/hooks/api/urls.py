"""``/api/v1/`` routes of webhooks (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import views

urlpatterns = [
    path("projects/<str:name>/webhooks/", views.WebhookListView.as_view(), name="project-webhooks"),
    path("projects/<str:name>/webhooks/<int:webhook_id>/", views.WebhookDetailView.as_view(),
         name="project-webhook"),
    path("projects/<str:name>/webhooks/<int:webhook_id>/deliveries/", views.DeliveryListView.as_view(),
         name="project-webhook-deliveries"),
]
