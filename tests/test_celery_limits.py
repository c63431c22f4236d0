"""The broker never hands a running task to a second worker (issue 26): with ``acks_late`` a Redis
broker redelivers a task not acked within its visibility timeout, so that timeout lies above every
registered task's hard time limit, read from the real Celery app."""
from __future__ import annotations

from e31site.celery import app


def test_the_visibility_timeout_lies_above_every_task_time_limit():
    app.loader.import_default_modules()  # autodiscover_tasks: every app's tasks module
    timeout = app.conf.broker_transport_options["visibility_timeout"]
    assert app.conf.task_acks_late  # the reason the timeout matters
    ours = {name: task for name, task in app.tasks.items() if name.startswith("apps.")}
    assert "apps.artifacts.tasks.bundle_verify_task" in ours  # the 6 h one is registered
    for name, task in ours.items():
        limit = task.time_limit if task.time_limit is not None else app.conf.task_time_limit
        assert limit, f"{name} has no hard time limit"
        assert timeout > limit, f"{name}: time limit {limit} s, visibility timeout {timeout} s"
    assert timeout > 6 * 3600  # not the Redis default of 1 h
