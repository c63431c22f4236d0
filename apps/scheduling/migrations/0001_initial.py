"""AccountUsage and SchedulerCycle move here from metering (issue 13). The rows stay: the models' state
is created here and deleted in metering (no SQL), then their tables are renamed metering_* -> scheduling_*."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('metering', '0007_lease_seen_at'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='SchedulerCycle',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('at', models.DateTimeField(db_index=True)),
                        ('policy', models.CharField(max_length=16)),
                        ('seconds', models.FloatField()),
                        ('queued', models.PositiveIntegerField()),
                        ('placed', models.PositiveIntegerField()),
                    ],
                    options={'ordering': ['-at'], 'db_table': 'metering_schedulercycle'},
                ),
                migrations.CreateModel(
                    name='AccountUsage',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('decayed_gpu_seconds', models.FloatField(default=0.0)),
                        ('updated_at', models.DateTimeField()),
                        ('recent_runtimes_s', models.JSONField(blank=True, default=list)),
                        ('owner', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='gpu_usage', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={'db_table': 'metering_accountusage'},
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name='schedulercycle', table=None),
        migrations.AlterModelTable(name='accountusage', table=None),
    ]
