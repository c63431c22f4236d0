from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # Django's idiom: these modules import models, so they load once the app registry is ready.
        from apps.scheduling.ports import register

        from . import queue, receivers

        register(queue.DatabaseJobQueue())
        receivers.connect()
