"""NodeDowntime moves here from metering (issue 13). The rows stay: the model's state is created here
and deleted in metering (no SQL), then its table is renamed metering_nodedowntime -> pool_nodedowntime."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('pool', '0003_node_sandboxed'),
        ('metering', '0007_lease_seen_at'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='NodeDowntime',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('down_at', models.DateTimeField()),
                        ('up_at', models.DateTimeField(blank=True, null=True)),
                        ('gpus', models.JSONField(default=dict)),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='downtimes', to='pool.node')),
                    ],
                    options={
                        'ordering': ['-down_at'],
                        'db_table': 'metering_nodedowntime',
                        'constraints': [models.UniqueConstraint(condition=models.Q(('up_at__isnull', True)), fields=('node',), name='one_open_downtime_per_node'), models.CheckConstraint(condition=models.Q(('up_at__isnull', True), ('up_at__gte', models.F('down_at')), _connector='OR'), name='downtime_up_after_down')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name='nodedowntime', table=None),
    ]
