"""Browser page of the pool. Mounted at ``/pool/``."""
from django.urls import path

from apps.web.pool import views

app_name = "pool"
urlpatterns = [
    path("", views.pool, name="summary"),
]
