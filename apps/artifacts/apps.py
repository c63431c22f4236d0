from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "apps.artifacts"
    label = "artifacts"

    def ready(self) -> None:
        from . import signals, tasks  # here, not at the top: tasks imports models, not loaded when apps.py is

        signals.bundle_verify_wanted.connect(tasks.enqueue_bundle_verify, dispatch_uid="artifacts-bundle-verify")
