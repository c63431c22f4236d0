from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "apps.scheduling"
    label = "scheduling"

    def ready(self) -> None:
        # Django's idiom: receivers import the tasks and models, loadable once the registry is ready.
        from . import receivers

        receivers.connect()
