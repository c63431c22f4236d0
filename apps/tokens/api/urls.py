"""``/api/v1/`` routes of the caller's API tokens (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

import apps.core.converters  # noqa: F401  (registers <id:...>)

from . import views

urlpatterns = [
    path("account/tokens/", views.TokenListView.as_view(), name="token-list"),
    path("account/tokens/<id:pk>/", views.TokenDetailView.as_view(), name="token-detail"),
    path("projects/<str:name>/tokens/", views.ServiceTokenListView.as_view(), name="project-tokens"),
    path("projects/<str:name>/tokens/<str:prefix>/", views.ServiceTokenDetailView.as_view(),
         name="project-token"),
]
