"""``/api/v1/`` routes of the pool (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import nodes

urlpatterns = [
    path("nodes/", nodes.NodeListView.as_view(), name="node-list"),
]
