"""Columns the database computes: the pod-sets and usage hashes that queue counts group on."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.models import Count, Min

from scheduling.models import Workload, examples
from scheduling.scheduler import bulk

pytestmark = pytest.mark.django_db

POD_SETS = [{"name": "main", "count": 2, "template": {"spec": {"containers": [
    {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]
ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [
    {"name": "main", "count": 2, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "2"}}]}


def _hashes(*workloads: Workload) -> list[tuple[str, str]]:
    rows = dict(Workload.objects.filter(pk__in=[w.pk for w in workloads])
                .values_list("pk", "pod_sets_hash"))
    usage = dict(Workload.objects.filter(pk__in=[w.pk for w in workloads])
                 .values_list("pk", "usage_hash"))
    return [(rows[w.pk], usage[w.pk]) for w in workloads]


def test_equal_pod_sets_share_a_hash_on_every_write_path(manager) -> None:
    saved = Workload.objects.create(cluster=manager, namespace="ns", name="saved",
                                    pod_sets=POD_SETS)
    with transaction.atomic():
        inserted, other = bulk.insert(Workload, [
            Workload(cluster=manager, namespace="ns", name="inserted", pod_sets=POD_SETS),
            Workload(cluster=manager, namespace="ns", name="other",
                     pod_sets=[{**POD_SETS[0], "count": 3}]),
        ])
    (saved_ps, _), (inserted_ps, _), (other_ps, _) = _hashes(saved, inserted, other)
    assert len(saved_ps) == 32
    assert saved_ps == inserted_ps != other_ps

    # An UPDATE of the pod sets (elastic scale-down writes them) moves the hash with them.
    Workload.objects.filter(pk=other.pk).update(pod_sets=POD_SETS)
    assert _hashes(other)[0][0] == saved_ps


def test_usage_hash_follows_admission_and_reclaimable_pods(manager) -> None:
    a, b = (Workload.objects.create(cluster=manager, namespace="ns", name=name,
                                    pod_sets=POD_SETS) for name in ("a", "b"))
    assert _hashes(a)[0][1] == _hashes(b)[0][1]  # pending, no admission: equal too

    Workload.objects.filter(pk__in=[a.pk, b.pk]).update(admission=ADMISSION)
    admitted = _hashes(a)[0][1]
    assert _hashes(b)[0][1] == admitted
    Workload.objects.filter(pk=b.pk).update(reclaimable_pods=[{"name": "main", "count": 1}])
    assert _hashes(b)[0][1] != admitted


def test_examples_reads_one_row_per_hash(manager) -> None:
    first, second = (Workload.objects.create(cluster=manager, namespace="ns", name=name,
                                             pod_sets=POD_SETS) for name in ("a", "b"))
    found = examples("pod_sets_hash", [first.pk, second.pk], "pod_sets")
    assert list(found.values())[0]["pod_sets"] == POD_SETS
    assert len(found) == 1


def test_pending_and_holding_indexes_are_partial() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexname, indexdef FROM pg_indexes "
                           "WHERE indexname IN ('workload_pending', 'workload_holding')")
        else:
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                           "AND name IN ('workload_pending', 'workload_holding')")
        found = dict(cursor.fetchall())
    assert "WHERE" in found["workload_pending"]
    assert "Pending" in found["workload_pending"]
    assert "Admitted" in found["workload_holding"]


def test_pending_counts_read_the_partial_index_on_sqlite() -> None:
    # SQLite keeps no statistics in embedded mode: it picks an index by how many of its
    # leading columns the query fixes, so workload_pending must fix as many as the
    # queue-order index (local queue and phase) to be taken over it.
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL chooses by its statistics")
    query = (Workload.objects.filter(local_queue__in=[1, 2], phase="Pending", active=True)
             .order_by().values_list("local_queue_id", "pod_sets_hash")
             .annotate(n=Count("*"), example=Min("id")))
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "workload_pending" in plan


def test_the_evicted_filter_reads_the_evicted_index(manager) -> None:
    # Migration 0011 writes the partial index per database; a partial index serves only a
    # query that repeats its predicate, so this fails if evicted_condition() and the
    # migration drift apart.
    from scheduling.filters import evicted_condition

    Workload.objects.create(cluster=manager, namespace="ns", name="evicted", pod_sets=POD_SETS,
                            conditions=[{"type": "Evicted", "status": "True"}])
    Workload.objects.create(cluster=manager, namespace="ns", name="readmitted",
                            pod_sets=POD_SETS, conditions=[{"type": "Evicted", "status": "False"}])
    query = Workload.objects.filter(evicted_condition()).order_by("-created_at", "-id")
    assert list(query.values_list("name", flat=True)) == ["evicted"]
    sql, params = query.values_list("id").query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A test table is tiny: make the planner say whether it *can* use the index.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "workload_evicted" in plan
