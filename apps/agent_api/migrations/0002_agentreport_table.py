# The moved table takes the new app's name (issue 13): jobs_agentreport -> agent_api_agentreport.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agent_api', '0001_initial'),
    ]

    operations = [
        migrations.AlterModelTable(name='agentreport', table=None),
    ]
