"""AccountProfile (-> core), AccountUsage and SchedulerCycle (-> scheduling) and NodeDowntime (-> pool)
left metering (issue 13): state only; their new apps' first migrations renamed the tables, rows kept."""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('metering', '0007_lease_seen_at'),
        ('core', '0001_account_profile'),
        ('scheduling', '0001_initial'),
        ('pool', '0004_node_downtime'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='AccountProfile'),
                migrations.DeleteModel(name='AccountUsage'),
                migrations.DeleteModel(name='SchedulerCycle'),
                migrations.DeleteModel(name='NodeDowntime'),
            ],
            database_operations=[],
        ),
    ]
