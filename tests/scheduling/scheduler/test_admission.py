"""The admission reconciler against the real database: decisions, writes, queue state."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError
from django.db.models import QuerySet

from multicluster.models import Cluster
from scheduling.choices import QueueState, WorkloadPhase
from scheduling.models import (
    AdmissionLease,
    ClusterQueue,
    Event,
    LocalQueue,
    ParkedShape,
    Workload,
)
from scheduling.scheduler import admission
from scheduling.workload.conditions import find
from tests.fixtures import plans

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def _cycle(cluster_id: int, at: datetime = NOW) -> admission.CycleOutcome:
    return admission.run_admission_cycle(cluster_id, now=at)


def _reload(wl: Workload) -> Workload:
    return Workload.objects.get(pk=wl.pk)


def _parked_with_shape(wl: Workload) -> bool:
    """Parked as Kueue's bulk move parks a head (BestEffortFIFO): by its shape's row, its
    own row left active."""
    row = _reload(wl)
    return row.queue_state == QueueState.ACTIVE and ParkedShape.objects.filter(
        cluster_queue=row.local_queue.cluster_queue, priority=row.priority,
        pod_sets_hash=row.pod_sets_hash).exists()


def test_admits_head_that_fits_and_records_admission(
    manager, make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload]
) -> None:
    make_queue("cq", {"cpu": "4", "memory": "8Gi"})
    wl = make_workload("a", "lq-cq", {"cpu": "1500m", "memory": "1Gi"}, count=2)

    outcome = _cycle(manager.pk)

    wl = _reload(wl)
    assert outcome.admitted == ["ns/a"]
    assert wl.phase == WorkloadPhase.ADMITTED
    assert wl.cluster_queue.name == "cq"
    assert wl.admission == {
        "clusterQueue": "cq",
        "podSetAssignments": [{
            "name": "main", "flavors": {"cpu": "default", "memory": "default"},
            "resourceUsage": {"cpu": "3", "memory": "2Gi"}, "count": 2,
        }],
    }
    assert find(wl.conditions, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue cq"
    assert find(wl.conditions, "Admitted")["status"] == "True"
    assert list(Event.objects.filter(workload=wl).values_list("reason", flat=True).order_by("id")) \
        == ["QuotaReserved", "Admitted"]


def test_one_head_per_cluster_queue_per_cycle_then_the_next(
    manager, make_queue, make_workload
) -> None:
    make_queue("cq", {"cpu": "4"})
    make_workload("first", "lq-cq", {"cpu": "1"})
    make_workload("second", "lq-cq", {"cpu": "1"})

    outcome = _cycle(manager.pk)

    # One call runs consecutive cycles in memory: each takes one head per queue, so the
    # queue's two workloads are admitted in two cycles, in queue order.
    assert outcome.admitted == ["ns/first", "ns/second"]
    assert outcome.cycle == 2
    assert outcome.heads == 2
    assert AdmissionLease.objects.get(cluster_id=manager.pk).cycle == 2


def test_a_round_stops_where_the_database_may_hold_more_heads(
    manager, make_queue, make_workload, monkeypatch
) -> None:
    make_queue("cq", {"cpu": "8"})
    for name in ("a", "b", "c", "d", "e"):
        make_workload(name, "lq-cq", {"cpu": "1"})
    monkeypatch.setattr(admission, "_CANDIDATES", (2, 2, 2))

    first = _cycle(manager.pk)
    second = _cycle(manager.pk, NOW + timedelta(seconds=1))

    # Two candidates loaded per queue: a round admits them and stops, the next loads more.
    assert first.admitted == ["ns/a", "ns/b"]
    assert second.admitted == ["ns/c", "ns/d"]


def _admission_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """The admission cycles asked for from now on (other reconcilers' requests left out)."""
    from kueueweb import reconcile

    asked: list[tuple[object, ...]] = []
    monkeypatch.setattr(reconcile, "request", lambda task, *args: asked.append(args)
                        if task == admission.ADMISSION_TASK else None)
    return asked


def test_a_settled_round_asks_for_no_other_cycle(
    manager, make_queue, make_workload, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    make_queue("cq", {"cpu": "2"})
    for name in ("a", "b", "c"):
        make_workload(name, "lq-cq", {"cpu": "1"})
    asked = _admission_requests(monkeypatch)

    with django_capture_on_commit_callbacks(execute=True):
        outcome = _cycle(manager.pk)

    # Two fit; the third was the head of the cycle after, which parked it: the next cycle
    # would decide the same, so none is asked for until something changes.
    assert outcome.admitted == ["ns/a", "ns/b"]
    assert outcome.settled
    assert asked == []


def test_a_round_stopped_at_its_last_loaded_candidate_asks_for_the_next(
    manager, make_queue, make_workload, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    make_queue("cq", {"cpu": "8"})
    for name in ("a", "b", "c"):
        make_workload(name, "lq-cq", {"cpu": "1"})
    monkeypatch.setattr(admission, "_CANDIDATES", (2, 2, 2))
    asked = _admission_requests(monkeypatch)

    with django_capture_on_commit_callbacks(execute=True):
        outcome = _cycle(manager.pk)

    assert outcome.admitted == ["ns/a", "ns/b"]
    assert not outcome.settled
    assert asked == [(manager.pk,)]


def test_a_round_refills_a_queue_of_small_workloads_sixteen_at_a_time(
    manager, make_queue, make_workload
) -> None:
    # Kueue's benchmark shapes: 30 queues load 16 candidates each, 1,000 queues 4.
    assert admission.candidates_per_queue(30) == 16
    assert admission.candidates_per_queue(1000) == 4
    make_queue("cq", {"cpu": "20"})
    for index in range(20):
        make_workload(f"w{index:02}", "lq-cq", {"cpu": "1"})

    first = _cycle(manager.pk)
    second = _cycle(manager.pk, NOW + timedelta(seconds=1))

    # Quota for all twenty: one call admits the sixteen it loaded, the next the rest.
    assert first.admitted == [f"ns/w{index:02}" for index in range(16)]
    assert second.admitted == [f"ns/w{index:02}" for index in range(16, 20)]


def test_higher_priority_is_head_even_when_newer(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "1"})
    make_workload("old-low", "lq-cq", {"cpu": "1"}, priority=0)
    make_workload("new-high", "lq-cq", {"cpu": "1"}, priority=10)

    assert _cycle(manager.pk).admitted == ["ns/new-high"]


def test_workload_that_does_not_fit_says_why_and_is_parked(
    manager, make_queue, make_workload
) -> None:
    make_queue("cq", {"cpu": "2"})
    big = make_workload("big", "lq-cq", {"cpu": "3"})

    outcome = _cycle(manager.pk)

    big = _reload(big)
    assert outcome.admitted == []
    assert big.phase == WorkloadPhase.PENDING
    assert _parked_with_shape(big)  # BestEffortFIFO parks it
    reserved = find(big.conditions, "QuotaReserved")
    assert reserved["status"] == "False"
    assert "insufficient quota for cpu in flavor default" in reserved["message"]


def test_parked_workload_comes_back_when_quota_changes(
    manager, make_queue, make_workload
) -> None:
    cq = make_queue("cq", {"cpu": "2"})
    big = make_workload("big", "lq-cq", {"cpu": "3"})
    _cycle(manager.pk)
    assert _parked_with_shape(big)

    cq.quotas.update(nominal_quota="4")
    outcome = _cycle(manager.pk, NOW + timedelta(seconds=1))

    assert outcome.admitted == ["ns/big"]


def test_an_unchanged_quota_tree_costs_a_cycle_one_read(
    manager, make_queue, make_workload, django_assert_num_queries
) -> None:
    from scheduling.cache import snapshots

    cq = make_queue("cq", {"cpu": "2"})
    make_workload("big", "lq-cq", {"cpu": "3"})
    _cycle(manager.pk)
    specs = snapshots.load_domain_specs(manager.pk)
    with django_assert_num_queries(1) as captured:
        admission._requeue_on_spec_change(manager.pk, specs, now=NOW)
    # No UPDATE, even of no row: on SQLite it would wait for the write lock.
    assert captured.captured_queries[0]["sql"].startswith("SELECT")

    cq.quotas.update(nominal_quota="4")
    changed = snapshots.load_domain_specs(manager.pk)
    admission._requeue_on_spec_change(manager.pk, changed, now=NOW)
    assert AdmissionLease.objects.get(cluster=manager).spec_fingerprint == changed.fingerprint


def test_strict_fifo_head_blocks_the_queue(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "2"}, queueing_strategy="StrictFIFO")
    make_workload("big", "lq-cq", {"cpu": "3"})
    small = make_workload("small", "lq-cq", {"cpu": "1"})

    for second in range(3):
        assert _cycle(manager.pk, NOW + timedelta(seconds=second)).admitted == []
    assert _reload(small).phase == WorkloadPhase.PENDING


def test_best_effort_fifo_lets_the_next_workload_in(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "2"})
    make_workload("big", "lq-cq", {"cpu": "3"})
    make_workload("small", "lq-cq", {"cpu": "1"})

    outcome = _cycle(manager.pk)

    # Cycle 1 parks the head that does not fit; cycle 2 admits the next one.
    assert outcome.admitted == ["ns/small"]
    assert outcome.cycle == 2
    assert _parked_with_shape(Workload.objects.get(name="big"))


def test_preemption_evicts_then_releases_then_admits_the_preemptor(
    manager, make_queue, make_workload
) -> None:
    make_queue("cq", {"cpu": "2"}, within_cluster_queue="LowerPriority")
    low = make_workload("low", "lq-cq", {"cpu": "2"}, priority=0)
    _cycle(manager.pk)
    high = make_workload("high", "lq-cq", {"cpu": "2"}, priority=100)

    first = _cycle(manager.pk, NOW + timedelta(seconds=1))
    low = _reload(low)
    assert first.preempted == ["ns/low"]
    assert first.admitted == []
    # Two-phase eviction: the victim keeps its quota until released.
    assert low.phase == WorkloadPhase.ADMITTED
    assert find(low.conditions, "Evicted")["reason"] == "Preempted"
    assert find(low.conditions, "Preempted")["reason"] == "InClusterQueue"
    assert _reload(high).preempting is True

    second = _cycle(manager.pk, NOW + timedelta(seconds=2))
    low, high = _reload(low), _reload(high)
    assert second.released == 1
    assert second.admitted == ["ns/high"]
    assert low.phase == WorkloadPhase.PENDING
    assert low.admission is None
    assert find(low.conditions, "Requeued")["status"] == "True"
    assert high.phase == WorkloadPhase.ADMITTED
    assert high.preempting is False


def test_a_strict_fifo_preemptor_is_not_sticky(manager, make_queue, make_workload) -> None:
    """Kueue keeps a sticky preemptor at the head of BestEffortFIFO queues only: in a
    StrictFIFO queue a workload ahead of the preemptor in queue order takes the head."""
    make_queue("cq", {"cpu": "2"}, within_cluster_queue="LowerPriority",
               queueing_strategy="StrictFIFO")
    make_workload("low", "lq-cq", {"cpu": "2"}, priority=0)
    _cycle(manager.pk)
    high = make_workload("high", "lq-cq", {"cpu": "2"}, priority=100)

    assert _cycle(manager.pk, NOW + timedelta(seconds=1)).preempted == ["ns/low"]
    assert _reload(high).preempting is False
    higher = make_workload("higher", "lq-cq", {"cpu": "2"}, priority=200)

    second = _cycle(manager.pk, NOW + timedelta(seconds=2))
    assert second.released == 1
    assert second.admitted == ["ns/higher"]
    assert _reload(higher).phase == WorkloadPhase.ADMITTED
    assert _reload(high).phase == WorkloadPhase.PENDING


def test_orphans_are_found_by_the_local_queue_index(manager, make_queue, make_workload) -> None:
    from django.db import connection

    other = Cluster.objects.create(name="other")
    make_queue("cq", {"cpu": "2"})
    make_workload("linked", "lq-cq", {"cpu": "1"})
    make_workload("orphan", "nope", {"cpu": "1"})
    make_workload("elsewhere", "nope", {"cpu": "1"}, cluster=other)

    orphans = admission.orphaned_workloads(manager.pk)
    assert [wl.name for wl in orphans] == ["orphan"]
    if connection.vendor == "sqlite":
        # Not every pending entry of the domain: a seek on the local queue.
        sql, params = orphans.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "local_queue_id=?" in plan
        assert "workload_domain_phase_queues" not in plan


def test_the_cluster_is_asked_to_sync_only_for_workloads_of_jobs(
    manager, make_queue, make_workload, monkeypatch
) -> None:
    # The cluster's reconciler starts and stops jobs: a bare workload gives it nothing to
    # do, and each admission cycle of a busy domain used to wake it for nothing.
    from kueueweb import reconcile
    from scheduling import services
    from tests.fixtures.scheduling import job_manifest

    asked: list[int] = []
    monkeypatch.setattr(reconcile, "request_cluster_sync", asked.append)
    make_queue("cq", {"cpu": "2"}, within_cluster_queue="LowerPriority")
    make_workload("bare", "lq-cq", {"cpu": "1"})
    assert _cycle(manager.pk).admitted == ["ns/bare"]
    assert asked == []

    services.submit_job(job_manifest("work", "lq-cq"), namespace="ns")
    assert len(_cycle(manager.pk, NOW + timedelta(seconds=1)).admitted) == 1
    assert asked == [manager.pk]

    # Preempting the job's workload: its pods must be stopped.
    make_workload("urgent", "lq-cq", {"cpu": "2"}, priority=100)
    preempted = _cycle(manager.pk, NOW + timedelta(seconds=2)).preempted
    assert sorted(preempted) == ["ns/bare", f"ns/{Workload.objects.get(job__name='work').name}"]
    assert asked == [manager.pk, manager.pk]


def test_missing_local_queue_is_explained(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "2"})
    orphan = make_workload("orphan", "nope", {"cpu": "1"})

    _cycle(manager.pk)

    assert find(_reload(orphan).conditions, "QuotaReserved")["message"] == \
        "LocalQueue nope doesn't exist"


def test_cycle_is_skipped_while_another_worker_holds_the_lease(
    manager, make_queue, make_workload
) -> None:
    from scheduling.scheduler.lease import acquire

    make_queue("cq", {"cpu": "2"})
    wl = make_workload("a", "lq-cq", {"cpu": "1"})
    assert acquire(manager.pk, "someone-else", now=NOW, duration=timedelta(seconds=30))

    assert _cycle(manager.pk).ran is False
    assert _reload(wl).phase == WorkloadPhase.PENDING
    # An expired lease is taken over.
    assert _cycle(manager.pk, NOW + timedelta(seconds=31)).admitted == ["ns/a"]


def test_an_applied_cycle_gives_the_lease_back_with_its_decisions(
    manager, make_queue, make_workload, monkeypatch
) -> None:
    # No transaction of its own for the release: the lease goes back in the one that
    # writes the decisions.
    def release(*args: object) -> bool:
        raise AssertionError("released in a transaction of its own")

    monkeypatch.setattr(admission, "release", release)
    make_queue("cq", {"cpu": "2"})
    make_workload("a", "lq-cq", {"cpu": "1"})

    assert _cycle(manager.pk).admitted == ["ns/a"]

    lease = AdmissionLease.objects.get(cluster=manager)
    assert (lease.holder, lease.expires_at, lease.wanted, lease.cycle) == ("", None, False, 1)
    # Free for the next worker straight away.
    assert admission.acquire_or_defer(manager.pk, "next", now=NOW,
                                      duration=timedelta(seconds=30))


def test_a_cycle_asked_for_while_one_ran_runs_after_it(
    manager, make_queue, make_workload, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from kueueweb import reconcile

    make_queue("cq", {"cpu": "2"})
    make_workload("a", "lq-cq", {"cpu": "3"})  # never fits: the cycle itself asks for none
    asked: list[tuple[str, tuple[object, ...]]] = []
    monkeypatch.setattr(reconcile, "request", lambda task, *args: asked.append((task, args)))
    decide = admission.run_cycles

    def run_cycles(*args: object, **kwargs: object) -> admission.Rounds:
        # Another worker is asked for a cycle meanwhile: it leaves the holder a note.
        assert not admission.acquire_or_defer(manager.pk, "other", now=NOW,
                                              duration=timedelta(seconds=30))
        return decide(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(admission, "run_cycles", run_cycles)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = _cycle(manager.pk)

    assert outcome.ran
    assert outcome.lease_returned
    assert not outcome.progressed
    assert asked == [(admission.ADMISSION_TASK, (manager.pk,))]
    lease = AdmissionLease.objects.get(cluster=manager)
    assert (lease.holder, lease.wanted) == ("", False)


def test_a_cycle_that_fails_gives_the_lease_back(
    manager, make_queue, make_workload, monkeypatch
) -> None:
    make_queue("cq", {"cpu": "2"})
    make_workload("a", "lq-cq", {"cpu": "1"})

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("engine failure")

    monkeypatch.setattr(admission, "run_cycles", broken)
    with pytest.raises(RuntimeError):
        _cycle(manager.pk)

    assert AdmissionLease.objects.get(cluster=manager).holder == ""


def test_admission_checks_hold_admitted_until_ready(manager, make_queue, make_workload) -> None:
    from multicluster.models import AdmissionCheck

    AdmissionCheck.objects.create(cluster=manager, name="manual", controller_name="kueueweb.io/manual")
    make_queue("cq", {"cpu": "2"}, admission_checks=[{"name": "manual"}])
    wl = make_workload("a", "lq-cq", {"cpu": "1"})

    _cycle(manager.pk)

    wl = _reload(wl)
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    assert find(wl.conditions, "Admitted")["reason"] == "UnsatisfiedAdmissionChecks"
    assert [c["state"] for c in wl.admission_check_states] == ["Pending"]


def test_queue_with_missing_admission_check_is_inactive(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "2"}, admission_checks=[{"name": "ghost"}])
    wl = make_workload("a", "lq-cq", {"cpu": "1"})

    outcome = _cycle(manager.pk)

    assert outcome.admitted == []
    assert "inactive" in find(_reload(wl).conditions, "QuotaReserved")["message"].lower()


@pytest.fixture
def reserved_with_check(manager, make_queue, make_workload):
    from multicluster.models import AdmissionCheck

    AdmissionCheck.objects.create(cluster=manager, name="manual", controller_name="kueueweb.io/manual")
    make_queue("cq", {"cpu": "2"}, admission_checks=[{"name": "manual"}])
    wl = make_workload("a", "lq-cq", {"cpu": "1"})
    _cycle(manager.pk)
    return _reload(wl)


def test_ready_check_admits_through_the_status_api(reserved_with_check, admin_client_api) -> None:
    response = admin_client_api.patch(
        "/api/v1/namespaces/ns/workloads/a/status",
        {"status": {"admissionChecks": [{"name": "manual", "state": "Ready", "message": "ok"}]}},
        format="json",
    )

    assert response.status_code == 200, response.json()
    wl = _reload(reserved_with_check)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert find(wl.conditions, "Admitted")["status"] == "True"
    assert response.json()["status"]["admissionChecks"][0]["state"] == "Ready"


def test_retry_check_evicts_and_requeues(reserved_with_check, manager) -> None:
    admission.set_admission_check_states(
        reserved_with_check.pk, [{"name": "manual", "state": "Retry"}], now=NOW)

    _cycle(manager.pk, NOW + timedelta(seconds=1))

    wl = _reload(reserved_with_check)
    evicted = find(wl.conditions, "Evicted")
    # Released and requeued in the same cycle that then admits it again with a fresh check;
    # re-reservation resets Evicted as Kueue's SetQuotaReservation does.
    assert (evicted["status"], evicted["reason"]) == ("False", "QuotaReserved")
    assert evicted["message"] == \
        "Previously: Evicted due to AdmissionCheck(s) in Retry state: manual"
    assert Event.objects.filter(workload=wl, reason="EvictedDueToAdmissionCheck").count() == 1
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    assert [c["state"] for c in wl.admission_check_states] == ["Pending"]


def test_rejected_check_deactivates(reserved_with_check, manager) -> None:
    admission.set_admission_check_states(
        reserved_with_check.pk, [{"name": "manual", "state": "Rejected"}], now=NOW)
    _cycle(manager.pk, NOW + timedelta(seconds=1))

    wl = _reload(reserved_with_check)
    assert wl.active is False
    assert wl.phase == WorkloadPhase.PENDING
    assert find(wl.conditions, "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"


def test_status_api_names_the_bad_field_and_refuses_non_admins(
    reserved_with_check, admin_client_api, operator_client
) -> None:
    bad = admin_client_api.patch(
        "/api/v1/namespaces/ns/workloads/a/status",
        {"status": {"admissionChecks": [{"name": "nope", "state": "Ready"}]}}, format="json")
    assert bad.status_code == 400
    assert "status.admissionChecks[0].name" in bad.json()
    refused = operator_client.patch(
        "/api/v1/namespaces/ns/workloads/a/status",
        {"status": {"admissionChecks": [{"name": "manual", "state": "Ready"}]}}, format="json")
    assert refused.status_code == 403
    assert _reload(reserved_with_check).phase == WorkloadPhase.QUOTA_RESERVED


def test_namespace_selector_matches_the_namespace_name_label(manager, make_queue,
                                                             make_workload) -> None:
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": ["ns"]}]}
    make_queue("cq", {"cpu": "2"}, namespace_selector=selector)
    from scheduling.models import LocalQueue

    LocalQueue.objects.create(cluster=manager, namespace="other", name="lq-cq",
                              cluster_queue=ClusterQueue.objects.get(name="cq"))
    outsider = make_workload("outsider", "lq-cq", {"cpu": "1"}, namespace="other", priority=9)
    insider = make_workload("insider", "lq-cq", {"cpu": "1"})

    outcome = _cycle(manager.pk)

    # The outsider is the first head and does not match: it is parked, then the insider
    # is admitted in the round's next cycle.
    assert "doesn't match" in find(_reload(outsider).conditions, "QuotaReserved")["message"]
    assert outcome.admitted == ["ns/insider"]
    assert outcome.cycle == 2
    assert _reload(insider).phase == WorkloadPhase.ADMITTED


def test_a_parked_head_parks_the_pending_workloads_of_its_shape(
    manager, make_queue, make_workload
) -> None:
    # Kueue's scheduling-equivalence hashing: under BestEffortFIFO a head parked for NoFit
    # takes every pending workload of the same priority and pod sets with it, so they are
    # not tried one by one; a different shape is still tried.
    make_queue("cq", {"cpu": "2"})
    # More of one shape than a round loads candidates.
    bigs = [make_workload(f"big-{i}", "lq-cq", {"cpu": "3"})
            for i in range(admission.candidates_per_queue(1) + 4)]
    other = make_workload("big-high", "lq-cq", {"cpu": "3"}, priority=-1)
    make_workload("small", "lq-cq", {"cpu": "1"}, priority=-2)

    first = _cycle(manager.pk)

    # The first round's candidates are all of big-0's shape: one is tried.
    assert first.heads == 1
    shape = ParkedShape.objects.get()
    assert (shape.cluster_queue.name, shape.priority, shape.pod_sets_hash) == (
        "cq", 0, _reload(bigs[0]).pod_sets_hash)
    assert (shape.reason, shape.message) == (
        "ExceedsMaxQuota", find(_reload(bigs[0]).conditions, "QuotaReserved")["message"])
    # Only the head that was tried is written (its condition); the others keep their rows
    # as they were. All wait behind the shape's row.
    assert _parked_with_shape(bigs[0])
    assert find(_reload(bigs[0]).conditions, "QuotaReserved")["status"] == "False"
    assert {(w.queue_state, w.resource_version) for w in map(_reload, bigs[1:])} == {
        (QueueState.ACTIVE, bigs[1].resource_version)}
    assert find(_reload(bigs[5]).conditions, "QuotaReserved") is None

    second = _cycle(manager.pk, NOW + timedelta(seconds=1))

    assert second.admitted == ["ns/small"]
    assert second.heads == 2  # big-high (another shape, also parked), then small
    assert _parked_with_shape(other)
    assert ParkedShape.objects.count() == 2


def test_a_head_that_parks_again_with_the_same_message_is_not_written(
    manager, make_queue, make_workload
) -> None:
    # Each release requeues the tree, and a head that still does not fit parks its shape
    # again. Its own row is not the one that holds it, so nothing of it is rewritten:
    # neither by the park nor by the requeue that undoes it.
    make_queue("cq", {"cpu": "2"})
    assert _cycle(manager.pk).admitted == []  # nothing to admit yet
    make_workload("running", "lq-cq", {"cpu": "2"})
    assert _cycle(manager.pk).admitted == ["ns/running"]
    waiting = make_workload("waiting", "lq-cq", {"cpu": "1"})
    _cycle(manager.pk, NOW + timedelta(seconds=1))
    parked = _reload(waiting)
    assert _parked_with_shape(parked)

    for second in (2, 3):
        admission.queue_inadmissible_workloads(manager.pk, None, now=NOW)
        assert not ParkedShape.objects.exists()
        outcome = _cycle(manager.pk, NOW + timedelta(seconds=second))
        assert outcome.heads == 1
        assert outcome.admitted == []
        assert _parked_with_shape(waiting)
        after = _reload(waiting)
        assert after.resource_version == parked.resource_version


def test_a_parked_shape_holds_later_workloads_of_it_until_the_queue_is_requeued(
    manager, make_queue, make_workload
) -> None:
    # Kueue puts a workload whose hash was bulk-moved straight into the inadmissible set,
    # and QueueInadmissibleWorkloads clears the bulk moves of the queue.
    make_queue("cq", {"cpu": "2"})
    make_workload("big-0", "lq-cq", {"cpu": "3"})
    _cycle(manager.pk)
    late = make_workload("big-late", "lq-cq", {"cpu": "3"})
    make_workload("small", "lq-cq", {"cpu": "1"}, priority=-2)

    assert [row["name"] for row in admission.select_heads(manager.pk, now=NOW, per_queue=8)] \
        == ["small"]
    assert "not yet tried" not in str(_reload(late).conditions)

    admission.queue_inadmissible_workloads(manager.pk, None, now=NOW)

    assert not ParkedShape.objects.exists()
    assert [row["name"] for row in admission.select_heads(manager.pk, now=NOW, per_queue=8)] \
        == ["big-0", "big-late", "small"]


def test_heads_read_again_at_the_same_version_are_not_loaded_again(
    manager, make_queue, make_workload
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_queue("cq", {"cpu": "1"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    make_workload("b", "lq-cq", {"cpu": "1"})
    first = admission.select_heads(manager.pk, now=NOW, per_queue=8)
    assert [row["name"] for row in first] == ["a", "b"]

    with CaptureQueriesContext(connection) as queries:
        second = admission.select_heads(manager.pk, now=NOW, per_queue=8)
    assert second == first
    assert not any('"pod_sets"' in query["sql"] for query in queries.captured_queries)

    # A write bumps the version: b is loaded again, with its new priority first.
    b = Workload.objects.get(name="b")
    b.priority = 5
    b.save()
    with CaptureQueriesContext(connection) as queries:
        third = admission.select_heads(manager.pk, now=NOW, per_queue=8)
    assert [(row["name"], row["priority"]) for row in third] == [("b", 5), ("a", 0)]
    assert sum('"pod_sets"' in query["sql"] for query in queries.captured_queries) == 1
    assert third[1] == first[0]


def test_the_sticky_preemptor_is_not_held_by_a_parked_shape(
    manager, make_queue, make_workload
) -> None:
    make_queue("cq", {"cpu": "2"})
    make_workload("big-0", "lq-cq", {"cpu": "3"})
    preemptor = make_workload("big-1", "lq-cq", {"cpu": "3"})
    _cycle(manager.pk)
    assert ParkedShape.objects.exists()
    Workload.objects.filter(pk=preemptor.pk).update(preempting=True)

    assert [row["name"] for row in admission.select_heads(manager.pk, now=NOW, per_queue=8)] \
        == ["big-1"]


def test_heads_of_several_shapes_and_local_queues_come_in_queue_order(
    manager, make_queue, make_workload
) -> None:
    # The heads of several shapes, of two local queues of the same cluster queue, come
    # out in Kueue's heap order: priority, then time.
    cq = make_queue("cq", {"cpu": "8"})
    LocalQueue.objects.create(cluster=manager, namespace="other", name="lq-cq",
                              cluster_queue=cq)
    created = []
    for i in range(4):  # two shapes of one priority, interleaved in time, in two namespaces
        created.append(make_workload(f"a-{i}", "lq-cq", {"cpu": "1"},
                                     namespace="ns" if i % 2 else "other"))
        created.append(make_workload(f"b-{i}", "lq-cq", {"cpu": "2"}))
    make_workload("high", "lq-cq", {"cpu": "3"}, priority=5)
    backing_off = make_workload("later", "lq-cq", {"cpu": "1"}, priority=9)
    Workload.objects.filter(pk=backing_off.pk).update(requeue_at=NOW + timedelta(seconds=5))
    for offset, wl in enumerate(created):  # queue order: a-0, b-0, a-1, b-1, ...
        Workload.objects.filter(pk=wl.pk).update(queued_at=NOW + timedelta(seconds=offset))

    def heads(per_queue: int) -> list[str]:
        return [row["name"] for row in admission.select_heads(manager.pk, now=NOW,
                                                              per_queue=per_queue)]

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert heads(8) == ["high", "a-0", "b-0", "a-1", "b-1", "a-2", "b-2", "a-3"]
    # A short queue is read row by row: no walk over its shapes.
    assert not any("RECURSIVE" in q["sql"] for q in queries.captured_queries)
    assert heads(3) == ["high", "a-0", "b-0"]

    ParkedShape.objects.create(cluster_queue=cq, priority=0,
                               pod_sets_hash=_reload(created[0]).pod_sets_hash,
                               reason="Pending", message="does not fit", parked_at=NOW)

    assert heads(8) == ["high", "b-0", "b-1", "b-2", "b-3"]
    # Back-off over: the workload is a candidate again, first by its priority.
    assert [row["name"] for row in admission.select_heads(
        manager.pk, now=NOW + timedelta(seconds=5), per_queue=2)] == ["later", "high"]


def test_a_long_parked_shape_ahead_is_passed_over_by_shape(
    manager, make_queue, make_workload
) -> None:
    # 40 workloads of a parked shape come first in the queue: more than head selection
    # reads row by row (4 per candidate, 32 here), so it reads the queue by its shapes.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cq = make_queue("cq", {"cpu": "8"})
    blocked = [make_workload(f"big-{i:02}", "lq-cq", {"cpu": "9"}, priority=5)
               for i in range(40)]
    for i in range(3):
        make_workload(f"small-{i}", "lq-cq", {"cpu": "1"})
    make_workload("two", "lq-cq", {"cpu": "2"})
    ParkedShape.objects.create(cluster_queue=cq, priority=5,
                               pod_sets_hash=_reload(blocked[0]).pod_sets_hash,
                               reason="Pending", message="does not fit", parked_at=NOW)

    def heads() -> list[str]:
        return [row["name"] for row in admission.select_heads(manager.pk, now=NOW, per_queue=8)]

    with CaptureQueriesContext(connection) as queries:
        assert heads() == ["small-0", "small-1", "small-2", "two"]
    assert any(q["sql"].startswith("WITH RECURSIVE") for q in queries.captured_queries)
    # The sticky preemptor is never held by its shape, and comes first.
    Workload.objects.filter(pk=blocked[39].pk).update(preempting=True)
    assert heads() == ["big-39", "small-0", "small-1", "small-2", "two"]


def test_the_walk_by_shape_reads_no_more_with_a_long_history(manager, make_queue) -> None:
    # The walk's cost is its seeks: finished workloads, most rows of a long-lived table,
    # must not add to it. Joined on the id each seek found, PostgreSQL planned the walk's
    # step for 30 queues as a hash join over the whole table, read on every call and
    # growing with the history.
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a plan of PostgreSQL's")
    pod_sets = [{"name": "main", "count": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]
    local_queues = []
    for i in range(30):
        make_queue(f"cq-{i:02}", {"cpu": "8"})
        local_queues.append(LocalQueue.objects.get(name=f"lq-cq-{i:02}"))

    def workloads(namespace: str, count: int, **fields: object) -> None:
        Workload.objects.bulk_create(
            Workload(cluster=manager, namespace=namespace, name=f"wl-{n:05}",
                     queue_name=local_queues[n % 30].name, local_queue=local_queues[n % 30],
                     pod_sets=pod_sets, queued_at=NOW, **fields)
            for n in range(count))

    # Every queue holds more rows of a parked shape than head selection reads one by one,
    # ahead of another shape, so every queue is read by its shapes.
    workloads("pending", 30 * 40, priority=5)
    workloads("pending-low", 30, priority=1)
    parked_hash = Workload.objects.filter(namespace="pending").values_list(
        "pod_sets_hash", flat=True).first()
    ParkedShape.objects.bulk_create(
        ParkedShape(cluster_queue=lq.cluster_queue, priority=5, pod_sets_hash=parked_hash,
                    reason="Pending", message="does not fit", parked_at=NOW)
        for lq in local_queues)

    def rows_read() -> int:
        """The workload rows the walk's plan reads (returned or filtered out), all loops."""
        plans.analyze("scheduling_workload")
        with plans.rows_read("scheduling_workload", "WITH RECURSIVE") as walks:
            admission.select_heads(manager.pk, now=NOW, per_queue=2)
        (read,) = walks
        return read

    before = rows_read()
    workloads("history", 8_000, phase=WorkloadPhase.FINISHED)
    after = rows_read()
    # A seek a shape and the first rows of each: none of the 8,000 finished rows.
    assert after == before, (before, after)
    assert before < 300


def test_parking_writes_one_row_per_shape_and_no_workload(
    manager, make_queue, make_workload, django_assert_num_queries
) -> None:
    make_queue("a", {"cpu": "2"})
    make_queue("b", {"cpu": "2"})
    for queue in ("a", "b"):
        for i in range(3):
            make_workload(f"{queue}-{i}", f"lq-{queue}", {"cpu": "3"}, priority=i % 2)
    rows = Workload.objects.order_by("pk").values("priority", "pod_sets_hash", "name")
    moves = [admission.BulkMove(admission.SchedulingShape(row["name"][0], row["priority"],
                                                          row["pod_sets_hash"]),
                                "Pending", "does not fit") for row in rows]
    ids = dict(ClusterQueue.objects.values_list("name", "pk"))
    versions = dict(Workload.objects.values_list("pk", "resource_version"))

    with django_assert_num_queries(1):
        admission.park_same_shapes(manager.pk, moves, ids, now=NOW)
    # Parking a shape again changes nothing (the first reason stays).
    admission.park_same_shapes(manager.pk, moves[:1], ids, now=NOW + timedelta(seconds=1))

    assert sorted(ParkedShape.objects.values_list("cluster_queue__name", "priority")) == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert set(ParkedShape.objects.values_list("parked_at", flat=True)) == {NOW}
    assert dict(Workload.objects.values_list("pk", "resource_version")) == versions
    assert admission.select_heads(manager.pk, now=NOW, per_queue=8) == []


def test_a_preemption_in_one_cohort_does_not_end_the_round_of_another(
    manager, make_queue, make_workload
) -> None:
    make_queue("a", {"cpu": "1"}, cohort="one",
               within_cluster_queue="LowerPriority")
    make_queue("b", {"cpu": "4"}, cohort="two")
    make_workload("low", "lq-a", {"cpu": "1"}, priority=0)
    assert _cycle(manager.pk).admitted == ["ns/low"]
    make_workload("high", "lq-a", {"cpu": "1"}, priority=10)
    for name in ("b1", "b2", "b3"):
        make_workload(name, "lq-b", {"cpu": "1"})

    outcome = _cycle(manager.pk, NOW + timedelta(seconds=1))

    # Cohort "one" stops after its preemption; cohort "two" goes on admitting one head
    # per cycle within the same round.
    assert outcome.preempted == ["ns/low"]
    assert outcome.admitted == ["ns/b1", "ns/b2", "ns/b3"]


@pytest.fixture
def batched_requeue(settings):
    # Kueue's requeueBatchPeriod (the production default); the test settings use 0.
    settings.KUEUEWEB = {**settings.KUEUEWEB, "REQUEUE_BATCH_PERIOD_SECONDS": 1.0}


def _finish(cluster_id: int, wl: Workload, at: datetime) -> None:
    from scheduling.workload import lifecycle

    row = _reload(wl)
    assert lifecycle.finish_workloads(cluster_id, {row.pk: row.resource_version}, "Succeeded",
                                      "done", now=at) == [row.pk]


def test_parked_workloads_come_back_one_batch_period_after_quota_is_released(
    manager, make_queue, make_workload, batched_requeue
) -> None:
    loaded = admission.candidates_per_queue(1)  # candidates a round loads per queue
    total = str(loaded + 4)
    make_queue("cq", {"cpu": total})
    running = make_workload("running", "lq-cq", {"cpu": total})
    assert _cycle(manager.pk).admitted == ["ns/running"]
    ones = [make_workload(f"one-{i:02}", "lq-cq", {"cpu": "1"}) for i in range(loaded + 4)]
    _cycle(manager.pk, NOW + timedelta(seconds=1))
    # The head is parked, and the others of its shape with it.
    assert _parked_with_shape(ones[0])
    assert ParkedShape.objects.count() == 1
    assert admission.select_heads(manager.pk, now=NOW, per_queue=8) == []

    _finish(manager.pk, running, NOW + timedelta(seconds=2))

    # Kueue's requeuer: one requeue of the cohort tree a batch period after the release.
    assert ClusterQueue.objects.get(name="cq").requeue_due_at == NOW + timedelta(seconds=3)
    assert _cycle(manager.pk, NOW + timedelta(seconds=2, milliseconds=500)).admitted == []
    outcome = _cycle(manager.pk, NOW + timedelta(seconds=3))
    assert ClusterQueue.objects.get(name="cq").requeue_due_at is None
    assert not ParkedShape.objects.exists()
    # The round admits the candidates it loaded; the other four are back in the queue too.
    assert len(outcome.admitted) == loaded
    assert len(_cycle(manager.pk, NOW + timedelta(seconds=3)).admitted) == 4


def test_one_requeue_of_the_tree_covers_the_releases_of_its_batch(
    manager, make_queue, make_workload, batched_requeue
) -> None:
    # A release marks its own queue only; the requeue, due a batch period after the first
    # release, requeues the whole cohort tree and clears the later marks in it.
    make_queue("a", {"cpu": "1"}, cohort="team")
    make_queue("b", {"cpu": "1"}, cohort="team")
    make_queue("c", {"cpu": "1"}, cohort="team")
    on_a = make_workload("on-a", "lq-a", {"cpu": "1"})
    on_b = make_workload("on-b", "lq-b", {"cpu": "1"})
    assert _cycle(manager.pk).admitted == ["ns/on-a", "ns/on-b"]
    waiting = make_workload("waiting", "lq-c", {"cpu": "3"})
    _cycle(manager.pk, NOW + timedelta(seconds=1))
    assert ParkedShape.objects.filter(cluster_queue__name="c").exists()

    _finish(manager.pk, on_a, NOW + timedelta(seconds=2))
    _finish(manager.pk, on_b, NOW + timedelta(seconds=2, milliseconds=500))

    due = dict(ClusterQueue.objects.values_list("name", "requeue_due_at"))
    assert due == {"a": NOW + timedelta(seconds=3), "b": NOW + timedelta(seconds=3.5),
                   "c": None}
    outcome = _cycle(manager.pk, NOW + timedelta(seconds=3))
    assert outcome.admitted == ["ns/waiting"]
    assert set(ClusterQueue.objects.values_list("requeue_due_at", flat=True)) == {None}
    assert _reload(waiting).phase == WorkloadPhase.ADMITTED


def test_a_requeue_that_fails_keeps_its_marks_for_the_next_cycle(
    manager, make_queue, make_workload, batched_requeue, monkeypatch
) -> None:
    make_queue("a", {"cpu": "1"}, cohort="team")
    make_queue("c", {"cpu": "1"}, cohort="team")
    on_a = make_workload("on-a", "lq-a", {"cpu": "1"})
    assert _cycle(manager.pk).admitted == ["ns/on-a"]
    waiting = make_workload("waiting", "lq-c", {"cpu": "2"})
    _cycle(manager.pk, NOW + timedelta(seconds=1))
    _finish(manager.pk, on_a, NOW + timedelta(seconds=2))
    update = QuerySet.update

    def fail_on_workloads(self: QuerySet, **values: object) -> int:
        if self.model is Workload and "queue_state" in values:
            raise DatabaseError("connection lost")
        return update(self, **values)

    monkeypatch.setattr(QuerySet, "update", fail_on_workloads)
    with pytest.raises(DatabaseError):
        admission.requeue_due_queues(manager.pk, now=NOW + timedelta(seconds=3))
    monkeypatch.undo()

    # Nothing of the requeue stayed: the mark, the parked shape, the parked workload.
    assert ClusterQueue.objects.get(name="a").requeue_due_at == NOW + timedelta(seconds=3)
    assert ParkedShape.objects.filter(cluster_queue__name="c").exists()
    outcome = _cycle(manager.pk, NOW + timedelta(seconds=3))
    assert outcome.admitted == ["ns/waiting"]
    assert _reload(waiting).phase == WorkloadPhase.ADMITTED


def test_a_release_during_a_cycle_does_not_leave_a_shape_parked(
    manager, make_queue, make_workload, monkeypatch
) -> None:
    # Quota released after a cycle read its snapshot: that cycle still parks the shape on
    # what it saw. The requeue the release asks for must come after that park (in the next
    # cycle, under the lease), or the shape's workloads would wait for another release
    # that may never come (Kueue's queueInadmissibleCycle guards the same race).
    make_queue("cq", {"cpu": "2"})
    running = make_workload("running", "lq-cq", {"cpu": "2"})
    assert _cycle(manager.pk).admitted == ["ns/running"]
    make_workload("next-0", "lq-cq", {"cpu": "2"})
    make_workload("next-1", "lq-cq", {"cpu": "2"})
    decide = admission.run_cycles

    def release_meanwhile(*args, **kwargs):
        rounds = decide(*args, **kwargs)
        _finish(manager.pk, running, NOW + timedelta(seconds=1))
        return rounds

    monkeypatch.setattr(admission, "run_cycles", release_meanwhile)
    assert _cycle(manager.pk, NOW + timedelta(seconds=1)).admitted == []
    monkeypatch.setattr(admission, "run_cycles", decide)

    assert ParkedShape.objects.exists()  # parked on the stale snapshot
    assert _cycle(manager.pk, NOW + timedelta(seconds=2)).admitted == ["ns/next-0"]


def test_a_requeue_reads_only_the_parked_rows(manager, make_queue, make_workload) -> None:
    # Every quota release requeues its tree: found by domain and phase, SQLite read every
    # pending row and parsed its conditions each time. By local queue and queue state it
    # reads the parked rows only, on an index that leads with those.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cq = make_queue("cq", {"cpu": "2"})
    parked = make_workload("parked", "lq-cq", {"cpu": "1"})
    waiting = make_workload("waiting", "lq-cq", {"cpu": "1"})
    Workload.objects.filter(pk=parked.pk).update(queue_state=QueueState.INADMISSIBLE)

    with CaptureQueriesContext(connection) as queries:
        assert admission.queue_inadmissible_workloads(manager.pk, [cq.pk], now=NOW) == 1

    assert _reload(parked).queue_state == QueueState.ACTIVE
    assert _reload(waiting).resource_version == waiting.resource_version
    if connection.vendor != "sqlite":
        return  # PostgreSQL chooses by its statistics
    update = next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE"))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + update)
        plan = [row[-1] for row in cursor.fetchall()]
    # Either index that leads with the local queue, phase and queue state.
    assert any(f"{index} (local_queue_id=? AND phase=? AND queue_state=?)" in step
               for step in plan for index in ("workload_queue_order", "workload_queue_shapes")
               ), plan


def test_a_cycle_before_a_batched_requeue_asks_for_a_cycle_at_its_time(
    manager, make_queue, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from kueueweb import reconcile

    make_queue("cq", {"cpu": "2"})
    ClusterQueue.objects.filter(name="cq").update(requeue_due_at=NOW + timedelta(seconds=3))
    asked: list[tuple[str, float, tuple[object, ...]]] = []
    monkeypatch.setattr(reconcile, "request_later",
                        lambda task, delay, *args: asked.append((task, delay, args)))

    # The wake-up asked for with the release may have found an earlier cycle's message and
    # sent none: that cycle asks for it again.
    with django_capture_on_commit_callbacks(execute=True):
        _cycle(manager.pk, NOW + timedelta(seconds=1))

    assert (admission.ADMISSION_TASK, 2.0, (manager.pk,)) in asked
    assert ClusterQueue.objects.get(name="cq").requeue_due_at == NOW + timedelta(seconds=3)
