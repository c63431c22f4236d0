"""Every owner of a job or an array gets a personal project (``~username``, they its owner), and their
jobs and arrays from before projects are put in it (SPEC §9)."""
from django.conf import settings
from django.db import migrations
from django.utils import timezone


def forwards(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    JobArray = apps.get_model("jobs", "JobArray")
    Project = apps.get_model("projects", "Project")
    Membership = apps.get_model("projects", "Membership")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    owners = set(Job.objects.filter(project__isnull=True).values_list("owner_id", flat=True).distinct())
    owners |= set(JobArray.objects.filter(project__isnull=True).values_list("owner_id", flat=True).distinct())
    now = timezone.now()
    for user in User.objects.filter(pk__in=owners):
        project = Project.objects.filter(personal_of=user).first()
        if project is None:
            project = Project.objects.create(name=f"~{user.username}", personal_of=user, created_at=now)
            Membership.objects.create(project=project, user=user, role="owner", added_at=now)
        Job.objects.filter(owner=user, project__isnull=True).update(project=project)
        JobArray.objects.filter(owner=user, project__isnull=True).update(project=project)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0013_job_project"), ("projects", "0001_projects")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
