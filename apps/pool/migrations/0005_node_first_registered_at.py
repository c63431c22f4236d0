from django.db import migrations, models
from django.db.models import Min


def backfill(apps, schema_editor):
    """A node's first registration: the earliest of its last registration, its first lease and its
    first recorded down span (the best evidence kept before the column existed)."""
    Node = apps.get_model("pool", "Node")
    Lease = apps.get_model("metering", "Lease")
    NodeDowntime = apps.get_model("pool", "NodeDowntime")
    for node in Node.objects.filter(first_registered_at__isnull=True):
        seen = [node.registered_at,
                Lease.objects.filter(node_id=node.pk).aggregate(t=Min("rented_at"))["t"],
                NodeDowntime.objects.filter(node_id=node.pk).aggregate(t=Min("down_at"))["t"]]
        seen = [t for t in seen if t is not None]
        if seen:
            Node.objects.filter(pk=node.pk).update(first_registered_at=min(seen))


class Migration(migrations.Migration):

    dependencies = [
        ('pool', '0004_node_downtime'),
        ('metering', '0008_models_moved_out'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='first_registered_at',
            field=models.DateTimeField(blank=True, help_text='When the node first joined the pool: the operator report counts its GPUs from then on.', null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
