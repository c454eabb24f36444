"""A fresh database has one cluster, the manager, connected to a simulated cluster whose
nodes come from settings (KUEUEWEB_DEFAULT_NODE_COUNT / _CPU / _MEMORY)."""

from django.conf import settings
from django.db import migrations


def create_manager(apps, schema_editor):
    Cluster = apps.get_model("multicluster", "Cluster")
    Node = apps.get_model("multicluster", "Node")
    if Cluster.objects.filter(role="manager").exists():
        return
    manager = Cluster.objects.create(name="manager", role="manager", connection_type="simulated")
    config = settings.KUEUEWEB
    Node.objects.bulk_create(
        Node(
            cluster=manager,
            name=f"node-{index}",
            capacity={
                "cpu": config["DEFAULT_NODE_CPU"],
                "memory": config["DEFAULT_NODE_MEMORY"],
                "pods": "110",
            },
            labels={"kubernetes.io/hostname": f"node-{index}"},
        )
        for index in range(1, config["DEFAULT_NODE_COUNT"] + 1)
    )


class Migration(migrations.Migration):
    dependencies = [("multicluster", "0002_initial")]
    operations = [migrations.RunPython(create_manager, migrations.RunPython.noop)]
