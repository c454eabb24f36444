"""A partial index of the workloads whose Evicted condition is True, for the workload list's
"evicted" state (``scheduling.filters.evicted_condition``).

Its predicate differs per database, so it is not in ``Workload.Meta.indexes``: a partial
index serves a query only when the query repeats the predicate, and the two databases
filter evicted workloads differently. PostgreSQL tests JSON containment, which the index
predicate repeats exactly; SQLite cannot put ``json_each`` in an index, so its index holds
the rows whose conditions mention Evicted at all (the cheap first test of the query), and
the query checks those few rows' status. Without it, counting the evicted workloads reads
every row's conditions, on both databases.
"""

from django.db import migrations

NAME = "workload_evicted"
TABLE = "scheduling_workload"
PREDICATES = {
    "postgresql": """"conditions" @> '[{"type": "Evicted", "status": "True"}]'::jsonb""",
    "sqlite": """"conditions" LIKE '%"Evicted"%'""",
}


def create(apps, schema_editor):
    predicate = PREDICATES.get(schema_editor.connection.vendor)
    if predicate:
        schema_editor.execute(
            f'CREATE INDEX "{NAME}" ON "{TABLE}" ("created_at", "id") WHERE {predicate}')


def drop(apps, schema_editor):
    if schema_editor.connection.vendor in PREDICATES:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}"')


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0010_workload_pending_and_holding_indexes"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
