"""Typed requirement columns on Job (issue 13, part 3), filled for existing rows from their spec.

The conversion is frozen here (GB = 10**9 bytes to MiB, rounded up), as
:func:`apps.jobs.spec.requirement_columns` does at submit.
"""
import math

from django.db import migrations, models

MIB = 1 << 20


def _mib(gb):
    return math.ceil(round(gb * 10**9) / MIB) if gb else 0


def backfill(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    batch = []
    for job in Job.objects.only("id", "spec").iterator(chunk_size=2000):
        compute = (job.spec or {}).get("compute") or {}
        job.gpu_models = list(compute.get("gpu_model") or [])
        job.gpu_memory_mib = _mib(compute.get("gpu_memory_gb"))
        job.cpus = compute.get("cpus") or 0
        job.memory_mib = _mib(compute.get("memory_gb"))
        job.needs_runtime = bool(((job.spec or {}).get("work") or {}).get("image"))
        batch.append(job)
        if len(batch) >= 2000:
            Job.objects.bulk_update(batch, ["gpu_models", "gpu_memory_mib", "cpus", "memory_mib", "needs_runtime"])
            batch = []
    if batch:
        Job.objects.bulk_update(batch, ["gpu_models", "gpu_memory_mib", "cpus", "memory_mib", "needs_runtime"])


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0005_job_arrays'),
    ]

    operations = [
        migrations.AddField(
            model_name='job', name='gpu_models',
            field=models.JSONField(blank=True, default=list, help_text='GPU models accepted; empty: any.'),
        ),
        migrations.AddField(
            model_name='job', name='gpu_memory_mib',
            field=models.PositiveIntegerField(default=0, help_text='MiB per GPU at least; 0: any.'),
        ),
        migrations.AddField(
            model_name='job', name='cpus',
            field=models.PositiveIntegerField(default=0, help_text='CPUs per node; 0: not asked.'),
        ),
        migrations.AddField(
            model_name='job', name='memory_mib',
            field=models.PositiveBigIntegerField(default=0, help_text='Memory per node, MiB; 0: not asked.'),
        ),
        migrations.AddField(
            model_name='job', name='needs_runtime',
            field=models.BooleanField(default=False, help_text='Names a container image.'),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
