"""ASGI entry point: HTTP to Django, WebSockets to the live-page consumers (docs/live.md).

Static files are served by WhiteNoise at the ASGI level (``e31site/staticasgi.py``), in
front of Django, which keeps the whole middleware chain async-capable: the agents' long
polls then wait on the event loop instead of holding a thread each. Behind a CDN or proxy
that serves ``STATIC_ROOT``, it is never reached.
"""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "e31site.settings")
from e31site.asgibody import get_asgi_application  # noqa: E402  (bundle chunks read into memory)
from e31site.staticasgi import WhiteNoiseASGI  # noqa: E402

django_asgi = WhiteNoiseASGI(get_asgi_application())

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from apps.live.consumers.base import RefuseConsumer  # noqa: E402
from apps.live.consumers.jobs import JobConsumer, JobListConsumer  # noqa: E402
from apps.live.consumers.pool import PoolConsumer  # noqa: E402
from e31site.bodylimit import BodyLimitMiddleware  # noqa: E402
from e31site.wsorigin import SameOriginValidator  # noqa: E402

# Any other path is refused cleanly (closed before any data), never a 500.
websocket_urlpatterns: list = [
    re_path(r"^ws/jobs/(?P<pk>[0-9]{1,18})/$", JobConsumer.as_asgi()),
    re_path(r"^ws/jobs/$", JobListConsumer.as_asgi()),
    re_path(r"^ws/pool/$", PoolConsumer.as_asgi()),
    re_path(r"", RefuseConsumer.as_asgi()),
]

application = ProtocolTypeRouter({
    "http": BodyLimitMiddleware(django_asgi),
    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
