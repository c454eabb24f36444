"""A fresh database has one cluster, the manager, connected to a simulated cluster whose
nodes come from settings (KUEUEWEB_DEFAULT_NODE_COUNT / _CPU / _MEMORY)."""

from django.db import migrations

from multicluster.bootstrap import ensure_manager_cluster


def create_manager(apps, schema_editor):
    ensure_manager_cluster(apps.get_model("multicluster", "Cluster"),
                           apps.get_model("multicluster", "Node"))


class Migration(migrations.Migration):
    dependencies = [("multicluster", "0002_initial")]
    operations = [migrations.RunPython(create_manager, migrations.RunPython.noop)]
