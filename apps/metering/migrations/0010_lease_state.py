"""Issue 22 item 2: a lease's state is one column moved only by apps.metering.lease; existing rows
get the state their time stamps say."""
from django.db import migrations, models
from django.db.models import Q


def derive_states(apps, schema_editor):
    """Fenced: released with its fence still up; closed: released otherwise; stopping: the run ended,
    not released; held: accepted; opening: the rest (the column's default)."""
    Lease = apps.get_model("metering", "Lease")
    released = Lease.objects.filter(released_at__isnull=False)
    released.filter(fenced_at__isnull=False, fence_lifted_at__isnull=True).update(state="fenced")
    released.filter(Q(fenced_at__isnull=True) | Q(fence_lifted_at__isnull=False)).update(state="closed")
    open_ = Lease.objects.filter(released_at__isnull=True)
    open_.filter(run_ended_at__isnull=False).update(state="stopping")
    open_.filter(run_ended_at__isnull=True, accepted_at__isnull=False).update(state="held")


class Migration(migrations.Migration):

    dependencies = [
        ("metering", "0009_budget_alert"),
    ]

    operations = [
        migrations.AddField(
            model_name="lease",
            name="state",
            field=models.CharField(choices=[("opening", "Opening"), ("held", "Held"), ("stopping", "Stopping"),
                                            ("fenced", "Fenced"), ("closed", "Closed")],
                                   default="opening", max_length=16),
        ),
        migrations.RunPython(derive_states, migrations.RunPython.noop),
    ]
