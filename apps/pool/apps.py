from django.apps import AppConfig


class PoolConfig(AppConfig):
    name = "apps.pool"
    label = "pool"
