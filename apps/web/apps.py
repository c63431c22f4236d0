from django.apps import AppConfig


class WebConfig(AppConfig):
    """Every HTML page: views, forms, fragments and template tags of jobs, usage, pool and notices."""

    name = "apps.web"
    label = "web"
    verbose_name = "Web pages"
