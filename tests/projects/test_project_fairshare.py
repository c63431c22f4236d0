"""Fair share by project on the live scheduler (issue 25 item 4): a project that used the pool
waits behind one that did not, whichever of its members submits, as Slurm's Fair Tree orders them."""
from __future__ import annotations

import re

from apps.core import clock
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.projects.services import project_create
from apps.scheduling.adapter import schedule_cycle
from apps.scheduling.usage import usage_record

from ..factories import UserFactory, node_with_gpus, spec


def test_a_busy_projects_fresh_member_waits_behind_a_quiet_project(team):
    node_with_gpus("only", count=1)
    quiet_user = UserFactory(username="quinn")
    quiet = project_create(owner=quiet_user, name="quiet")
    # The ml project used a week of GPU time through one member; mia, another member, has used none.
    usage_record(owner_id=team.owner.pk, gpu_seconds=7 * 86400, runtime_s=60, now=clock.now(),
                 project_id=team.project.pk)
    holder = job_submit(owner=quiet_user, document=spec(project="quiet", name="holder"))
    schedule_cycle()
    assert Job.objects.get(pk=holder.pk).state == "rented"  # the only GPU is taken
    first = job_submit(owner=team.member, document=spec(project="ml", name="mia-first"))
    second = job_submit(owner=quiet_user, document=spec(project=quiet.name, name="quinn-later"))
    schedule_cycle()
    order = list(Job.objects.filter(pk__in=[first.pk, second.pk]).order_by("queue_position")
                 .values_list("name", flat=True))
    assert order == ["quinn-later", "mia-first"]  # submitted later, ranked first: its project is owed more


def test_a_quote_weighs_the_fair_share_of_the_project_it_names(team):
    from datetime import datetime

    from apps.jobs.quotes import job_quote

    node_with_gpus("only", count=1)
    quiet_user = UserFactory(username="quinn")
    quiet = project_create(owner=quiet_user, name="quiet")
    # ml used a week of GPU time, quiet a day; mia's personal project none.
    usage_record(owner_id=team.owner.pk, gpu_seconds=7 * 86400, runtime_s=60, now=clock.now(),
                 project_id=team.project.pk)
    usage_record(owner_id=quiet_user.pk, gpu_seconds=86400, runtime_s=60, now=clock.now(),
                 project_id=quiet.pk)
    job_submit(owner=quiet_user, document=spec(project="quiet", name="holder"))
    schedule_cycle()  # the only GPU is taken
    job_submit(owner=quiet_user, document=spec(project="quiet", name="waiting"))
    schedule_cycle()

    def likely(document) -> datetime:
        quote = job_quote(owner=team.member, document=document)["quotes"][0]
        return datetime.fromisoformat(quote["estimated_start_at"])

    # Sent in ml, mia's job would wait behind quinn's; sent in her own project, ahead of it.
    assert likely(spec(project="ml")) > likely(spec())
    # The New job form's panel quotes for the project picked (the picker is sent with the compute fields).
    from .conftest import client_of

    def panel_likely(query: str) -> str:
        html = client_of(team.member).get(f"/jobs/new/estimate/?gpus=1&time_limit=1h{query}").content.decode()
        return re.search(r"<tbody>\s*<tr><td>[^<]+</td><td>([^<]+)</td>", html.split("When it would start")[1])[1]

    assert panel_likely("&project=ml") != panel_likely("")
