"""Covering indexes for the API lists' namespace/name order, on PostgreSQL only.

A late page (``?offset=40000``) reads the ordered ids first (``kueueweb.pagination``). The
unique (cluster, namespace, name) index lacks the id, so PostgreSQL sorts the whole table
instead; with the id included it walks the index alone.
SQLite keeps the rowid in every index already: there the unique index serves as it is, and a
second one would only cost writes.
"""

from django.db import migrations

TABLES = (("scheduling_workload", "workload_list_order"), ("scheduling_job", "job_list_order"))


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, name in TABLES:
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" '
            '("cluster_id", "namespace", "name") INCLUDE ("id")')


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for _, name in TABLES:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0008_workload_queue_order_heap"),
    ]

    operations = [migrations.RunPython(create, drop)]
