"""``/api/v1/`` routes of the meter (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import views

urlpatterns = [
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("pool/", views.PoolView.as_view(), name="pool"),
    path("account/", views.AccountView.as_view(), name="account"),
]
