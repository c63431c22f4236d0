"""AccountProfile moves here from metering (issue 13). The rows stay: the model's state is created
here and deleted in metering (no SQL), then its table is renamed metering_accountprofile -> core_accountprofile."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import apps.core.models


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
                    name='AccountProfile',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('time_zone', models.CharField(default='UTC', help_text='IANA name, e.g. Europe/Berlin. Days and months are counted in it.', max_length=64, validators=[apps.core.models.validate_time_zone])),
                        ('monthly_spend_limit', models.DecimalField(blank=True, decimal_places=2, help_text="USD per calendar month (in the account's time zone); empty for no limit. A job whose worst case exceeds what is left is refused at submit; running jobs are never stopped.", max_digits=12, null=True)),
                        ('owner', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='account_profile', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'metering_accountprofile',
                        'constraints': [models.CheckConstraint(condition=models.Q(('monthly_spend_limit__isnull', True), ('monthly_spend_limit__gte', 0), _connector='OR'), name='account_spend_limit_not_negative')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name='accountprofile', table=None),
    ]
