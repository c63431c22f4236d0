# AgentReport moves to apps.agent_api (issue 13); its rows stay where they are.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0006_job_requirement_columns'),
    ]

    operations = [
        # State only: agent_api.0001 takes the model (and the table, jobs_agentreport) over.
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='AgentReport')],
            database_operations=[],
        ),
    ]
