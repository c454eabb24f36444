"""The three roles as groups: viewer, operator, admin."""

from django.db import migrations

from multicluster.bootstrap import ensure_role_groups


def create_groups(apps, schema_editor):
    ensure_role_groups(apps.get_model("auth", "Group"))


class Migration(migrations.Migration):
    dependencies = [("kueueweb", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
