"""From rows to engine specs: the domain's specs are reused only while their rows hold."""

from __future__ import annotations

import pytest
from django.db.models import F

from multicluster.models import AdmissionCheck
from scheduling.cache import snapshots
from scheduling.core.workloads import WorkloadInfo
from scheduling.models import ClusterQueue, Cohort, FlavorQuota, ResourceFlavor

pytestmark = pytest.mark.django_db


def _nominal(specs: snapshots.DomainSpecs, queue: str) -> int | None:
    cq = next(q for q in specs.cluster_queues if q.name == queue)
    return cq.resource_groups[0].flavors[0].resources["cpu"].nominal


def test_specs_are_reused_while_only_status_columns_change(manager, make_queue) -> None:
    make_queue("cq", {"cpu": "2"}, cohort="team")
    first = snapshots.load_domain_specs(manager.pk)

    # What reconcilers write all the time: generation, requeue time, conditions.
    ClusterQueue.objects.update(allocatable_generation=F("allocatable_generation") + 1,
                                conditions=[{"type": "Active", "status": "True"}])

    assert snapshots.load_domain_specs(manager.pk) is first


@pytest.mark.parametrize("change", ["quota", "queue", "cohort", "flavor", "check"])
def test_a_spec_change_through_any_write_path_is_seen_at_once(manager, make_queue,
                                                               change) -> None:
    # Queryset updates bypass save() and signals: the rows themselves are compared.
    make_queue("cq", {"cpu": "2"}, cohort="team", admission_checks=[{"name": "check"}])
    first = snapshots.load_domain_specs(manager.pk)
    assert first.inactive == {"cq": "AdmissionCheckNotFound"}
    if change == "quota":
        FlavorQuota.objects.update(nominal_quota="5")
    elif change == "queue":
        ClusterQueue.objects.update(stop_policy="Hold")
    elif change == "cohort":
        Cohort.objects.update(fair_sharing_weight="2")
    elif change == "flavor":
        ResourceFlavor.objects.update(node_labels={"zone": "a"})
    else:
        AdmissionCheck.objects.create(cluster=manager, name="check",
                                      controller_name="example.com/check")

    second = snapshots.load_domain_specs(manager.pk)

    assert second is not first
    assert second.fingerprint != first.fingerprint
    if change == "quota":
        assert (_nominal(first, "cq"), _nominal(second, "cq")) == (2000, 5000)


def test_an_admission_check_turning_active_makes_its_queue_active(manager, make_queue) -> None:
    # The check's Active condition is status, but the specs read it: a queue whose check
    # was inactive when a worker process first built its specs stayed inactive there
    # for good (the fault test of a lost worker cluster timed out on it now and then).
    check = AdmissionCheck.objects.create(
        cluster=manager, name="check", controller_name="example.com/check",
        conditions=[{"type": "Active", "status": "False", "reason": "NoClusters"}])
    make_queue("cq", {"cpu": "2"}, admission_checks=[{"name": "check"}])
    assert snapshots.load_domain_specs(manager.pk).inactive == {"cq": "AdmissionCheckInactive"}

    AdmissionCheck.objects.filter(pk=check.pk).update(
        conditions=[{"type": "Active", "status": "True", "reason": "Active"}])

    assert snapshots.load_domain_specs(manager.pk).inactive == {}


def test_each_domain_keeps_its_own_specs(manager, make_queue) -> None:
    from multicluster.models import Cluster

    other = Cluster.objects.create(name="other")
    make_queue("here", {"cpu": "1"})
    make_queue("there", {"cpu": "1"}, cluster=other)

    assert [q.name for q in snapshots.load_domain_specs(manager.pk).cluster_queues] == ["here"]
    assert [q.name for q in snapshots.load_domain_specs(other.pk).cluster_queues] == ["there"]
    assert [q.name for q in snapshots.load_domain_specs(manager.pk).cluster_queues] == ["here"]


# =========================================================================================
# Rows read again at the same version are not loaded again
# =========================================================================================


def _admit_all(cluster_id: int) -> None:
    from django.utils import timezone

    from scheduling.scheduler import admission

    admission.run_admission_cycle(cluster_id, now=timezone.now())


def test_reserving_rows_are_loaded_again_only_when_their_version_changed(
        manager, make_queue, make_workload, django_assert_num_queries) -> None:
    from scheduling.models import Workload

    make_queue("cq", {"cpu": "4"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    make_workload("b", "lq-cq", {"cpu": "1"}, count=2)
    _admit_all(manager.pk)
    first = {row["name"]: row for row in snapshots.reserving_rows(manager.pk)}
    assert sorted(first) == ["a", "b"]

    with django_assert_num_queries(1):  # ids, uids and versions; no row is loaded
        second = {row["name"]: row for row in snapshots.reserving_rows(manager.pk)}
    assert second["a"] is first["a"]
    assert second["b"] is first["b"]
    built = snapshots.reserving_cache.built(manager.pk, second["a"])
    # What the snapshot holds, made once per version of the row.
    assert isinstance(built, WorkloadInfo)
    assert snapshots.reserving_cache.built(manager.pk, second["a"]) is built

    # A queryset update that bumps the version, as every writer of these columns does.
    Workload.objects.filter(name="b").update(
        reclaimable_pods=[{"name": "main", "count": 1}],
        resource_version=F("resource_version") + 1)
    with django_assert_num_queries(2):  # and b's row
        third = {row["name"]: row for row in snapshots.reserving_rows(manager.pk)}
    assert third["a"] is first["a"]
    assert third["b"]["reclaimable_pods"] == [{"name": "main", "count": 1}]
    # One of b's two pods is reclaimable: it holds quota for one.
    assert snapshots.reserving_cache.built(manager.pk, third["b"]).workload.pod_sets[0].count == 1

    Workload.objects.filter(name="a").update(active=False,
                                             resource_version=F("resource_version") + 1)
    assert [row["name"] for row in snapshots.reserving_rows(manager.pk)] == ["b"]


def test_rows_an_admission_cycle_reserved_are_not_loaded_by_the_next(
        manager, make_queue, make_workload, django_assert_num_queries,
        django_capture_on_commit_callbacks) -> None:
    from scheduling.models import Workload

    make_queue("cq", {"cpu": "4"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    make_workload("b", "lq-cq", {"cpu": "500m"}, count=2)
    with django_capture_on_commit_callbacks(execute=True):
        _admit_all(manager.pk)

    with django_assert_num_queries(1):  # ids, uids and versions; no row is loaded
        seeded = {row["name"]: row for row in snapshots.reserving_rows(manager.pk)}

    # Exactly what a load from the database gives, value for value.
    loaded = {row["name"]: row for row in Workload.objects.filter(name__in=["a", "b"])
              .values(*snapshots.RESERVING_FIELDS)}
    assert seeded == loaded
    assert loaded["b"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {"cpu": "1"}


def test_reserved_rows_are_kept_only_once_the_cycle_commits(
        manager, make_queue, make_workload, django_assert_num_queries) -> None:
    # The test's transaction never commits: the cycle's on-commit callbacks do not run,
    # as after a rollback, and the rows it wrote must be loaded.
    make_queue("cq", {"cpu": "4"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    _admit_all(manager.pk)

    with django_assert_num_queries(2):  # ids, uids and versions; then a's row
        assert [row["name"] for row in snapshots.reserving_rows(manager.pk)] == ["a"]


def test_a_row_cache_tells_apart_rows_that_reused_an_id() -> None:
    import uuid

    loads: list[list[int]] = []
    database: dict[int, dict[str, object]] = {}

    def load(ids):
        loads.append(list(ids))
        return [database[pk] for pk in ids if pk in database]

    cache = snapshots.RowCache(lambda row: f"built {row['value']}")
    first, second = uuid.uuid4(), uuid.uuid4()
    database[7] = {"id": 7, "uid": first, "resource_version": 1, "value": "first"}
    # SQLite's column holds the uid's hex digits, the ORM a UUID: the same key.
    assert cache.rows(1, {7: (first.hex, 1)}, load) == [database[7]]
    assert cache.rows(1, {7: (first, 1)}, load) == [database[7]]
    assert loads == [[7]]

    # Deleted, and the id taken again by another workload at version 1.
    database[7] = {"id": 7, "uid": second, "resource_version": 1, "value": "second"}
    rows = cache.rows(1, {7: (second, 1)}, load)
    assert [row["value"] for row in rows] == ["second"]
    assert cache.built(1, rows[0]) == "built second"
    assert loads == [[7], [7]]

    # Each domain keeps what its last read asked for, and nothing else.
    assert cache.rows(2, {}, load) == []
    assert cache.rows(1, {}, load) == []
    assert cache.rows(1, {7: (second, 1)}, load)[0]["value"] == "second"
    assert loads == [[7], [7], [7]]


def test_a_row_cache_keeps_spares_from_earlier_reads() -> None:
    # Heads whose shape is parked while their cluster queue is full are not read for a
    # while, then read again at the same version once quota is released: a read of
    # nothing in between must not make them load again.
    loads: list[list[int]] = []

    def load(ids):
        loads.append(list(ids))
        return [{"id": pk, "uid": f"{pk:032x}", "resource_version": 1} for pk in ids]

    def wanted(*ids):
        return {pk: (f"{pk:032x}", 1) for pk in ids}

    cache = snapshots.RowCache(lambda row: row["id"], spare=3)
    cache.rows(1, wanted(1, 2, 3), load)
    assert cache.rows(1, {}, load) == []
    assert sorted(row["id"] for row in cache.rows(1, wanted(1, 2), load)) == [1, 2]
    assert loads == [[1, 2, 3]]

    # Beside a read, only the ``spare`` rows read last are kept: after 3, then 1 and 2,
    # then 4 and 5, the read of 6 keeps 2, 4 and 5, and 3 is gone.
    cache.rows(1, wanted(4, 5), load)
    cache.rows(1, wanted(6), load)
    assert sorted(row["id"] for row in cache.rows(1, wanted(2, 3), load)) == [2, 3]
    assert loads == [[1, 2, 3], [4, 5], [6], [3]]

    # The cache of workloads holding quota keeps no spares: every read asks for them all.
    assert snapshots.reserving_cache.spare == 0


def _pending_row(name: str, namespace: str, cpu: str, digest: str) -> dict[str, object]:
    import datetime
    import uuid

    return {"id": 1, "uid": uuid.uuid4(), "resource_version": 1, "namespace": namespace,
            "name": name, "queue_name": "lq", "priority": 0, "active": True,
            "queued_at": None, "created_at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
            "pod_sets_hash": digest,
            "pod_sets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"cpu": cpu}}}]}}}]}


def test_equal_pod_sets_are_converted_once_and_shared() -> None:
    memo = snapshots.EnginePodSetsMemo(size=8)
    snapshots.engine_pod_sets, saved = memo, snapshots.engine_pod_sets
    try:
        a = snapshots.pending_workload(_pending_row("a", "ns", "2", "h1"))
        b = snapshots.pending_workload(_pending_row("b", "ns", "2", "h1"))
    finally:
        snapshots.engine_pod_sets = saved
    assert a.pod_sets is b.pod_sets  # made once
    assert (a.name, b.name) == ("a", "b")
    assert a.pod_sets[0].requests == {"cpu": 2000}  # the limit stands in for the request


def test_pod_sets_of_a_colliding_digest_are_converted_for_themselves() -> None:
    memo = snapshots.EnginePodSetsMemo(size=8)
    objects = snapshots.NO_CLUSTER_OBJECTS
    first = memo.get(_pending_row("a", "ns", "2", "same"), objects)
    second = memo.get(_pending_row("b", "ns", "3", "same"), objects)
    assert first[0][0].requests == {"cpu": 2000}
    assert second[0][0].requests == {"cpu": 3000}
    # A row without the digest is converted, not looked up.
    assert memo.get(_pending_row("c", "ns", "4", ""), objects)[0][0].requests == {"cpu": 4000}


def test_pod_sets_adjusted_by_a_namespace_limit_range_are_kept_apart() -> None:
    from scheduling.jobframework import resources

    memo = snapshots.EnginePodSetsMemo(size=8)
    objects = snapshots.ClusterObjects(summaries={"limited": resources.summarize([[
        {"type": "Container", "defaultRequest": {"memory": "1Gi"}}]])})
    plain = memo.get(_pending_row("a", "free", "2", "h1"), objects)
    limited = memo.get(_pending_row("b", "limited", "2", "h1"), objects)
    assert plain[0][0].requests == {"cpu": 2000}
    assert limited[0][0].requests == {"cpu": 2000, "memory": 1024 ** 3}
