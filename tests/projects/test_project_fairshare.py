"""Fair share by project on the live scheduler (issue 25 item 4): a project that used the pool
waits behind one that did not, whichever of its members submits, as Slurm's Fair Tree orders them."""
from __future__ import annotations

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
