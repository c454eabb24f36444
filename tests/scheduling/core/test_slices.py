"""Scale-up workload slices in the cycle (Kueue ``pkg/scheduler/scheduler.go`` ``replaceWorkloadSlice``).

A head that replaces an admitted slice of the same queue is checked for the extra pods
only, on the flavors the old slice holds, and is admitted with the full counts.
"""

from __future__ import annotations

from scheduling.core import (
    Decision,
    FlavorResource,
    Head,
    WithinClusterQueuePolicy,
    run_cycle,
)
from tests.builders import admitted, cluster_queue, snapshot, workload

LOWER = WithinClusterQueuePolicy.LOWER_PRIORITY


def _only(result):
    (head,) = result.results
    return head


def test_scale_up_is_checked_for_the_extra_pods_and_admitted_with_the_full_counts() -> None:
    # 1 CPU quota, 3 pods of 100m admitted: 5 pods need only 200m more.
    snap = snapshot(
        [cluster_queue("cq", quotas={"default": {"cpu": "1", "memory": "1Gi"}})],
        admitted_workloads=[admitted("old", "cq", count=3, cpu="100m", memory="100Mi")],
    )
    head = Head(workload("new", count=5, cpu="100m", memory="100Mi"), "cq", replaces="default/old")
    result = _only(run_cycle(snap, [head], now=0.0, cycle=1))
    assert result.decision is Decision.ADMITTED
    assert result.replaced_slice == "default/old"
    assert result.admission is not None
    (psa,) = result.admission.pod_sets
    assert psa.count == 5
    assert psa.resource_usage == {"cpu": 500, "memory": 500 * 1024**2}
    # Only the delta was charged: the old slice's 300m stays in the snapshot.
    assert snap.cluster_queues["cq"].usage[FlavorResource("default", "cpu")] == 500


def test_scale_up_that_needs_more_than_the_free_quota_waits() -> None:
    snap = snapshot(
        [cluster_queue("cq", quotas={"default": {"cpu": "1"}})],
        admitted_workloads=[admitted("old", "cq", count=3, cpu="200m"),
                            admitted("other", "cq", count=1, cpu="300m")],
    )
    # 3 more pods need 600m; 100m are free (600m + 300m held).
    head = Head(workload("new", count=6, cpu="200m"), "cq", replaces="default/old")
    result = _only(run_cycle(snap, [head], now=0.0, cycle=1))
    # Within nominal quota but no queue preemption: it waits for quota to free.
    assert result.decision is Decision.NO_CANDIDATES
    assert result.replaced_slice == ""
    assert "insufficient unused quota for cpu in flavor default, 500m more needed" in result.message


def test_scale_up_is_restricted_to_the_flavor_the_old_slice_holds() -> None:
    # The old slice runs on "spot"; "on-demand" comes first and has room, spot does not.
    snap = snapshot(
        [cluster_queue("cq", quotas={"on-demand": {"cpu": "10"}, "spot": {"cpu": "2"}})],
        admitted_workloads=[admitted("old", "cq", "spot", count=2, cpu="1")],
    )
    head = Head(workload("new", count=3, cpu="1"), "cq", replaces="default/old")
    result = _only(run_cycle(snap, [head], now=0.0, cycle=1))
    assert result.decision is Decision.NO_CANDIDATES
    assert ("could not assign on-demand flavor since the original workload is assigned: spot"
            in result.message)
    assert "insufficient unused quota for cpu in flavor spot, 1 more needed" in result.message


def test_scale_up_preempts_lower_priority_work_for_the_extra_pods_only() -> None:
    snap = snapshot(
        [cluster_queue("cq", quotas={"default": {"cpu": "4"}}, within=LOWER)],
        admitted_workloads=[
            admitted("old", "cq", count=2, cpu="1", priority=100, admitted_at=1.0),
            admitted("low-a", "cq", count=1, cpu="1", priority=0, admitted_at=2.0),
            admitted("low-b", "cq", count=1, cpu="1", priority=0, admitted_at=3.0),
        ],
    )
    # 3 pods: one more CPU, so exactly one low-priority victim; never the old slice.
    head = Head(workload("new", count=3, cpu="1", priority=100), "cq", replaces="default/old")
    result = _only(run_cycle(snap, [head], now=10.0, cycle=1))
    assert result.decision is Decision.PREEMPTING
    victims = [t.workload_key for t in result.preemption_targets]
    assert victims == ["default/low-b"]
    assert "default/old" not in victims


def test_without_the_old_slice_in_the_queue_the_head_is_scheduled_in_full() -> None:
    snap = snapshot([cluster_queue("cq", quotas={"default": {"cpu": "4"}})])
    head = Head(workload("new", count=3, cpu="1"), "cq", replaces="default/gone")
    result = _only(run_cycle(snap, [head], now=0.0, cycle=1))
    assert result.decision is Decision.ADMITTED
    assert result.replaced_slice == ""
    assert result.admission is not None
    assert result.admission.pod_sets[0].resource_usage == {"cpu": 3000}


def test_a_slice_claimed_by_a_preemptor_is_not_replaced_in_the_same_cycle() -> None:
    # A high-priority head of another queue reclaims the old slice's quota first.
    from scheduling.core import ReclaimWithinCohortPolicy

    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "2"}}, cohort="co"),
            cluster_queue("b", quotas={"default": {"cpu": "2"}}, cohort="co",
                          reclaim=ReclaimWithinCohortPolicy.ANY),
        ],
        admitted_workloads=[admitted("old", "a", count=4, cpu="1", admitted_at=1.0)],
    )
    heads = [
        Head(workload("reclaimer", cpu="2", priority=1000), "b"),
        Head(workload("new", count=4, cpu="1"), "a", replaces="default/old"),
    ]
    result = run_cycle(snap, heads, now=10.0, cycle=1)
    by_key = {r.key: r for r in result.results}
    assert by_key["default/reclaimer"].decision is Decision.PREEMPTING
    assert [t.workload_key for t in by_key["default/reclaimer"].preemption_targets] == [
        "default/old"]
    assert by_key["default/new"].decision is Decision.SKIPPED
    assert by_key["default/new"].replaced_slice == ""
