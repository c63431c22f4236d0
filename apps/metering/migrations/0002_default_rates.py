"""Default GPU rates for a fresh site (USD per GPU-hour); operators change them in the admin."""
from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

DEFAULTS = {
    "H200-141GB": "3.49",
    "H100-80GB": "2.49",
    "A100-80GB": "1.79",
    "A100-40GB": "1.29",
    "L40S-48GB": "0.99",
    "RTX4090-24GB": "0.49",
}


def add_rates(apps, schema_editor):
    GpuRate = apps.get_model("metering", "GpuRate")
    since = datetime(2020, 1, 1, tzinfo=UTC)
    for model, rate in DEFAULTS.items():
        GpuRate.objects.get_or_create(gpu_model=model, valid_from=since,
                                      defaults={"rate_per_gpu_hour": Decimal(rate)})


class Migration(migrations.Migration):
    dependencies = [("metering", "0001_initial")]
    operations = [migrations.RunPython(add_rates, migrations.RunPython.noop)]
