# AgentReport, moved from apps.jobs (issue 13) with its rows: the state is created over the
# existing table jobs_agentreport (nothing in the database changes), then 0002 renames the table.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('jobs', '0007_agentreport_to_agent_api'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AgentReport',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name='ID')),
                        ('attempt', models.PositiveIntegerField()),
                        ('node_rank', models.PositiveIntegerField(default=0, help_text='Rank of the node that sent it: each rank of a multi-node job numbers its reports from 1.')),
                        ('seq', models.PositiveIntegerField()),
                        ('type', models.CharField(max_length=32)),
                        ('received_at', models.DateTimeField()),
                        ('payload', models.JSONField(default=dict)),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                  related_name='agent_reports', to='jobs.job')),
                    ],
                    options={'db_table': 'jobs_agentreport'},
                ),
                migrations.AddConstraint(
                    model_name='agentreport',
                    constraint=models.UniqueConstraint(fields=('job', 'attempt', 'node_rank', 'seq'),
                                                       name='agent_report_seq_unique'),
                ),
            ],
            database_operations=[],
        ),
    ]
