"""URL map: pages, sign-in, admin, API and its schema."""
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("apps.jobs.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include("apps.jobs.urls")),
    path("usage/", include("apps.metering.urls")),
    path("account/", include("apps.metering.account_urls")),
    path("pool/", include("apps.pool.urls")),
    path("notices/", include("apps.notices.urls")),
]
