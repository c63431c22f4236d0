"""Move DRF's plain-text tokens (table ``authtoken_token``) here, hashed, and drop that table.

``rest_framework.authtoken`` is no longer installed, so its table is read with
SQL when it exists (a database made before issue 11); every key keeps working
(``Authorization: Token <key>`` is unchanged), but only its SHA-256 is kept.
"""
import hashlib

from django.db import migrations

PLAIN = "authtoken_token"


def hash_plain_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if PLAIN not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tokens", "ApiToken")
    with connection.cursor() as cur:
        cur.execute(f"SELECT key, user_id, created FROM {PLAIN}")  # noqa: S608 (a constant)
        rows = cur.fetchall()
    for key, user_id, created in rows:
        token = ApiToken.objects.create(user_id=user_id, key_hash=hashlib.sha256(key.encode()).hexdigest(),
                                        prefix=key[:8])
        ApiToken.objects.filter(pk=token.pk).update(created_at=created)
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE {PLAIN}")


class Migration(migrations.Migration):

    dependencies = [("tokens", "0001_initial")]

    operations = [migrations.RunPython(hash_plain_tokens, migrations.RunPython.noop)]
