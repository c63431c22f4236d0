"""URL map: pages, sign-in, admin, API and its schema. Wiring only: each app has its own routes.

``/api/v1/`` is one ``api`` namespace made of each app's ``api/urls.py`` (``reverse("api:job-list")``,
``reverse("api:agent-work")``...), in the order the paths were always matched.
"""
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.agent_api.api import urls as agent_api_urls
from apps.artifacts.api import urls as artifacts_api_urls
from apps.hooks.api import urls as hooks_api_urls
from apps.jobs.api import urls as jobs_api_urls
from apps.metering.api import urls as metering_api_urls
from apps.pool.api import urls as pool_api_urls
from apps.projects.api import urls as projects_api_urls
from apps.secrets.api import urls as secrets_api_urls
from apps.tokens.api import urls as tokens_api_urls

api_v1 = [
    *jobs_api_urls.urlpatterns,
    *metering_api_urls.urlpatterns,
    *pool_api_urls.urlpatterns,
    *artifacts_api_urls.urlpatterns,
    *secrets_api_urls.urlpatterns,
    *tokens_api_urls.urlpatterns,
    *projects_api_urls.urlpatterns,
    *hooks_api_urls.urlpatterns,
    *agent_api_urls.urlpatterns,
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include("apps.web.jobs.urls")),
    path("usage/", include("apps.web.metering.urls")),
    path("account/secrets/", include("apps.web.secrets.urls")),
    path("projects/", include("apps.web.projects.urls")),
    path("account/", include("apps.web.metering.account_urls")),
    path("pool/", include("apps.web.pool.urls")),
    path("notices/", include("apps.web.notices.urls")),
    path("", include("apps.ops.urls")),
]
