"""Issue 12 case 4: side work cannot stall the core. A release e-mail to a mail server that
never greets holds the side worker; scheduling, the node watch and time limits go on."""
from __future__ import annotations

import pytest

from apps.jobs.models import Job
from apps.notices.models import NoticePreference
from tests.e2e.test_faults import submit, wait_until
from tests.e2e.test_five_steps import token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_a_silent_mail_server_does_not_stop_scheduling(stack_with, silent_mail_server):
    mail_env = {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(silent_mail_server), "EMAIL_USE_TLS": "0",
                "EMAIL_TIMEOUT": "60", "E31_TASK_SOFT_TIME_LIMIT_S": "50", "E31_TASK_TIME_LIMIT_S": "55"}
    stack = stack_with(env=mail_env)
    user = UserFactory(username="mailed", email="mailed@example.com")
    NoticePreference.objects.create(owner=user, email_on_release=True)
    client = token_client(stack.url, user)
    # Three releases queue three e-mails; the side worker hangs on the first for up to 60 s.
    for _ in range(3):
        job = submit(client, "true")
        assert wait_until(lambda j=job: Job.objects.get(pk=j).state == "released", 30)
    # The core goes on: jobs are placed, run and released while the mail hangs.
    later = [submit(client, "true") for _ in range(3)]
    assert wait_until(lambda: all(Job.objects.get(pk=j).state == "released" for j in later), 30)
    # The node watch too: a job past its limit is ended by the agent and released timed_out.
    slow = submit(client, "sleep 60", limit="3s")
    assert wait_until(lambda: Job.objects.get(pk=slow).outcome == "timed_out", 30)
