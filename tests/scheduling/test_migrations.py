"""Migrations that do more than the model state says: indexes outside it (0009), and rows
migrated under a new constraint (0016)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor


@pytest.mark.django_db
def test_list_order_indexes_cover_the_id_on_postgresql_only() -> None:
    # Migration 0009: PostgreSQL needs the id inside the namespace/name index to answer a
    # late page from the index alone; SQLite's indexes carry the rowid already.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN "
                "('workload_list_order', 'job_list_order') ORDER BY indexname")
            found = dict(cursor.fetchall())
            assert set(found) == {"job_list_order", "workload_list_order"}
            for definition in found.values():
                assert "(cluster_id, namespace, name) INCLUDE (id)" in definition
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND name IN "
                           "('workload_list_order', 'job_list_order')")
            assert cursor.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_job_names_become_unique_per_kind_and_group() -> None:
    # Migration 0016: jobs stored before it keep their rows and get their API group; from then
    # on two kinds may share a name in a namespace, one kind may not have it twice.
    clusters = ("multicluster", "0006_cluster_create_namespaces")
    before = [clusters, ("scheduling", "0015_job_manifest_help_text")]
    after = [clusters, ("scheduling", "0016_job_unique_per_kind")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        cluster = old.get_model("multicluster", "Cluster").objects.create(name="migration-test")
        old.get_model("scheduling", "Job").objects.create(
            cluster=cluster, namespace="team-a", name="train", manifest={})
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        jobs = new.get_model("scheduling", "Job").objects
        assert list(jobs.values_list("name", "api_group", "kind")) == [("train", "batch", "Job")]
        jobs.create(cluster_id=cluster.pk, namespace="team-a", name="train",
                    api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet", manifest={})
        assert sorted(jobs.values_list("api_group", "kind")) == [
            ("batch", "Job"), ("jobset.x-k8s.io", "JobSet")]
        with pytest.raises(IntegrityError), transaction.atomic():
            jobs.create(cluster_id=cluster.pk, namespace="team-a", name="train",
                        api_version="jobset.x-k8s.io/v1", kind="JobSet", manifest={})
    finally:
        MigrationExecutor(connection).migrate(
            MigrationExecutor(connection).loader.graph.leaf_nodes())
