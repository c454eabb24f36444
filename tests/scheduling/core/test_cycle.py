"""One admission cycle: nomination, ordering, processing and the reported decisions."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core import (
    CyclePolicy,
    Decision,
    FlavorResource,
    Head,
    LabelSelector,
    LabelSelectorRequirement,
    ReclaimWithinCohortPolicy,
    RequeueReason,
    SelectorOperator,
    StopPolicy,
    WithinClusterQueuePolicy,
    run_cycle,
)
from tests.builders import admitted, cluster_queue, cohort, pod_set, snapshot, workload

CPU = FlavorResource("default", "cpu")
ANY = ReclaimWithinCohortPolicy.ANY
LOWER = WithinClusterQueuePolicy.LOWER_PRIORITY


def _by_key(result):
    return {r.key: r for r in result.results}


def test_admits_one_head_per_queue_and_charges_the_snapshot() -> None:
    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "4"}}),
            cluster_queue("b", quotas={"default": {"cpu": "4"}}),
        ]
    )
    result = run_cycle(
        snap,
        [Head(workload("wa", cpu="3"), "a"), Head(workload("wb", count=2, cpu="2"), "b")],
        now=0.0,
        cycle=1,
    )
    decisions = _by_key(result)
    assert [r.key for r in result.admitted] == ["default/wa", "default/wb"]
    admission = decisions["default/wb"].admission
    assert admission is not None
    assert admission.cluster_queue == "b"
    assert admission.pod_sets[0].flavors == {"cpu": "default"}
    assert admission.pod_sets[0].count == 2
    assert admission.pod_sets[0].resource_usage == {"cpu": 4000}
    assert decisions["default/wb"].message == "Quota reserved in ClusterQueue b"
    assert snap.cluster_queues["b"].usage[CPU] == 4000


def test_entries_within_nominal_go_before_borrowing_ones() -> None:
    # the high-priority head would borrow; the low-priority one fits its nominal quota
    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "2"}}, cohort="co"),
            cluster_queue("b", quotas={"default": {"cpu": "2"}}, cohort="co"),
        ]
    )
    result = run_cycle(
        snap,
        [
            Head(workload("borrower", priority=100, cpu="3"), "a"),
            Head(workload("modest", cpu="2"), "b"),
        ],
        now=0.0,
    )
    decisions = _by_key(result)
    assert [r.key for r in result.results] == ["default/modest", "default/borrower"]
    assert decisions["default/modest"].decision is Decision.ADMITTED
    borrower = decisions["default/borrower"]
    assert borrower.decision is Decision.SKIPPED
    assert borrower.message == "Workload no longer fits after processing another workload"
    assert borrower.requeue_reason is RequeueReason.FAILED_AFTER_NOMINATION
    assert borrower.requeue_immediately is True
    assert borrower.quota_reserved_reason == "WaitingForQuota"


def test_preemption_is_issued_and_the_preemptor_waits() -> None:
    snap = snapshot(
        [cluster_queue("q", quotas={"default": {"cpu": "2"}}, within=LOWER)],
        admitted_workloads=[admitted("victim", "q", priority=-1, cpu="2")],
    )
    [result] = run_cycle(
        snap, [Head(workload("in", priority=1, uid="in-uid", cpu="2"), "q")], now=0.0
    ).results
    assert result.decision is Decision.PREEMPTING
    assert result.requeue_reason is RequeueReason.PENDING_PREEMPTION
    assert result.quota_reserved_reason == "WaitingForPreemptedWorkloads"
    assert result.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default, 2 more needed. Pending the preemption of 1 workload(s)"
    )
    [target] = result.preemption_targets
    assert target.workload_key == "default/victim"
    assert target.reason == "InClusterQueue"
    assert target.message == (
        "Preempted to accommodate a workload (UID: in-uid, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: /q; preemptee path: /q"
    )
    # victims keep their quota until they are gone; scan progress restarts
    assert snap.cluster_queues["q"].workloads.keys() == {"default/victim"}
    assert result.last_assignment is None


def _reclaim_setup(victims: dict[str, str]):
    return snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "2"}}, cohort="co", reclaim=ANY),
            cluster_queue("b", quotas={"default": {"cpu": "2"}}, cohort="co", reclaim=ANY),
            cluster_queue("c", quotas={"default": {"cpu": "0"}}, cohort="co"),
        ],
        admitted_workloads=[admitted(n, "c", cpu=v) for n, v in victims.items()],
    )


def test_overlapping_victims_are_recomputed_with_new_targets() -> None:
    snap = _reclaim_setup({"v1": "2", "v2": "2"})
    result = run_cycle(
        snap,
        [
            Head(workload("pa", created=1, cpu="2"), "a"),
            Head(workload("pb", created=2, cpu="2"), "b"),
        ],
        now=0.0,
    )
    decisions = _by_key(result)
    assert [t.workload_key for t in decisions["default/pa"].preemption_targets] == ["default/v1"]
    assert [t.workload_key for t in decisions["default/pb"].preemption_targets] == ["default/v2"]


def test_overlapping_victims_that_free_enough_defer_the_fit() -> None:
    snap = _reclaim_setup({"v": "4"})
    result = run_cycle(
        snap,
        [
            Head(workload("pa", created=1, cpu="2"), "a"),
            Head(workload("pb", created=2, cpu="2"), "b"),
        ],
        now=0.0,
    )
    decisions = _by_key(result)
    assert decisions["default/pa"].decision is Decision.PREEMPTING
    deferred = decisions["default/pb"]
    assert deferred.decision is Decision.WAITING_FOR_PREEMPTIONS
    assert deferred.requeue_reason is RequeueReason.PENDING_PREEMPTION
    assert deferred.preemption_targets == ()


def test_preempt_without_candidates_holds_capacity_unless_it_can_always_reclaim() -> None:
    for policy, want in (("LowerPriority", Decision.SKIPPED), ("Any", Decision.ADMITTED)):
        snap = snapshot(
            [
                cluster_queue(
                    "lender",
                    quotas={"default": {"gpu": "2"}},
                    cohort="root",
                    reclaim=ReclaimWithinCohortPolicy(policy),
                ),
                cluster_queue("borrower", quotas={"default": {"gpu": "0"}}, cohort="root"),
            ],
            admitted_workloads=[admitted("a1", "lender", gpu="1")],
        )
        result = _by_key(
            run_cycle(
                snap,
                [
                    Head(workload("a2", gpu="2"), "lender"),
                    Head(workload("b1", gpu="1"), "borrower"),
                ],
                now=0.0,
            )
        )
        assert result["default/a2"].decision is Decision.NO_CANDIDATES
        assert result["default/a2"].parked is True
        assert result["default/b1"].decision is want, policy


def test_heads_that_fail_nomination_are_reported_with_reasons() -> None:
    eng_only = LabelSelector(
        match_expressions=(LabelSelectorRequirement("dep", SelectorOperator.IN, ("eng",)),)
    )
    snap = snapshot(
        [
            cluster_queue("eng", quotas={"default": {"cpu": "4"}}, namespace_selector=eng_only),
            cluster_queue("held", quotas={"default": {"cpu": "4"}}, stop_policy=StopPolicy.HOLD),
        ],
        namespaces={"sales": {"dep": "sales"}},
    )
    result = _by_key(
        run_cycle(
            snap,
            [
                Head(workload("mismatch", namespace="sales", cpu="1"), "eng"),
                Head(workload("stopped", namespace="sales", cpu="1"), "held"),
                Head(workload("lost", namespace="sales", cpu="1"), "gone"),
            ],
            now=0.0,
        )
    )
    mismatch = result["sales/mismatch"]
    assert mismatch.decision is Decision.INADMISSIBLE
    assert mismatch.message == "workload namespace doesn't match ClusterQueue selector"
    assert mismatch.requeue_reason is RequeueReason.NAMESPACE_MISMATCH
    assert mismatch.quota_reserved_reason == "Misconfigured"
    assert result["sales/stopped"].message == "ClusterQueue held is inactive"
    assert result["sales/stopped"].quota_reserved_reason == "Suspended"
    assert result["sales/lost"].message == "ClusterQueue gone not found"


def test_a_missing_selector_matches_no_namespace() -> None:
    spec = cluster_queue("q", quotas={"default": {"cpu": "1"}})
    snap = snapshot([replace(spec, namespace_selector=None)])
    [result] = run_cycle(snap, [Head(workload("w", cpu="1"), "q")], now=0.0).results
    assert result.requeue_reason is RequeueReason.NAMESPACE_MISMATCH


def test_partial_admission_shrinks_to_what_fits() -> None:
    snap = snapshot([cluster_queue("q", quotas={"default": {"cpu": "50"}})])
    wl = workload("w", pod_sets=[pod_set("one", 50, min_count=20, cpu="2")])
    [result] = run_cycle(snap, [Head(wl, "q")], now=0.0).results
    assert result.admission is not None
    assert result.admission.pod_sets[0].count == 25
    [disabled] = run_cycle(
        snapshot([cluster_queue("q", quotas={"default": {"cpu": "50"}})]),
        [Head(wl, "q")],
        now=0.0,
        policy=CyclePolicy(partial_admission=False),
    ).results
    assert disabled.decision is Decision.NO_FIT
    assert disabled.quota_reserved_reason == "ExceedsMaxQuota"


def test_fair_sharing_admits_the_entry_with_the_lowest_share_first() -> None:
    snap = snapshot(
        [
            cluster_queue("b", quotas={"default": {"cpu": "0"}}, cohort="all"),
            cluster_queue("c", quotas={"default": {"cpu": "0"}}, cohort="all"),
        ],
        cohorts=[cohort("all", quotas={"default": {"cpu": "100"}})],
        admitted_workloads=[admitted("b0", "b", cpu="10")],
    )
    result = run_cycle(
        snap,
        [Head(workload("b1", cpu="50"), "b"), Head(workload("c1", cpu="75"), "c")],
        now=0.0,
        policy=CyclePolicy(fair_sharing=True),
    )
    decisions = _by_key(result)
    # b would end at 60, c at 75: b goes first and c no longer fits
    assert [r.key for r in result.results] == ["default/b1", "default/c1"]
    assert decisions["default/b1"].decision is Decision.ADMITTED
    assert decisions["default/c1"].decision is Decision.SKIPPED


def test_no_admission_into_quota_that_victims_still_hold() -> None:
    # c borrows 5 of the cohort's 6; pa reclaims a's nominal by preempting v, which frees
    # 3 more than pa needs. Kueue's fit check counts v as gone, so it would admit pb and pd
    # now, while v still holds its 5: 7 of 6 in use until v stops. They wait instead.
    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "4"}}, cohort="co", reclaim=ANY),
            cluster_queue("b", quotas={"default": {"cpu": "1"}}, cohort="co"),
            cluster_queue("d", quotas={"default": {"cpu": "1"}}, cohort="co"),
            cluster_queue("c", quotas={"default": {"cpu": "0"}}, cohort="co"),
        ],
        admitted_workloads=[admitted("v", "c", cpu="5")],
    )
    result = run_cycle(
        snap,
        [
            Head(workload("pa", priority=3, cpu="2"), "a"),
            Head(workload("pb", priority=2, cpu="1"), "b"),
            Head(workload("pd", priority=1, cpu="1"), "d"),
        ],
        now=0.0,
    )
    decisions = _by_key(result)
    assert decisions["default/pa"].decision is Decision.PREEMPTING
    assert [t.workload_key for t in decisions["default/pa"].preemption_targets] == ["default/v"]
    for key in ("default/pb", "default/pd"):
        assert decisions[key].decision is Decision.SKIPPED
        assert decisions[key].requeue_reason is RequeueReason.FAILED_AFTER_NOMINATION
    assert result.admitted == ()


def test_a_fit_check_simulates_only_the_victims_of_its_own_tree(monkeypatch) -> None:
    # Kueue's fits() removes every victim claimed in the cycle before checking a head. A
    # victim of another cohort tree cannot change what the head's queue may use, so only
    # the head's own tree's victims are removed (with 1,000 heads and hundreds of victims
    # the removals were most of a cycle); the decisions are the same.
    from scheduling.core.snapshot import Snapshot

    calls: list[list[str]] = []
    simulate = Snapshot.simulate_usage_removal

    def record(self, infos):
        infos = list(infos)
        calls.append(sorted(info.key for info in infos))
        return simulate(self, infos)

    monkeypatch.setattr(Snapshot, "simulate_usage_removal", record)

    def cycle(*heads: Head) -> dict:
        snap = snapshot(
            [
                cluster_queue("a", quotas={"default": {"cpu": "2"}}, cohort="one", within=LOWER),
                cluster_queue("c", quotas={"default": {"cpu": "2"}}, cohort="two"),
            ],
            cohorts=[cohort("one"), cohort("two")],
            admitted_workloads=[admitted("va", "a", priority=-1, cpu="2")],
        )
        calls.clear()
        return _by_key(run_cycle(snap, list(heads), now=0.0))

    preemptor = Head(workload("pa", priority=3, cpu="2"), "a")
    alone = cycle(preemptor)
    calls_alone = list(calls)
    with_other_tree = cycle(preemptor, Head(workload("pc", priority=1, cpu="2"), "c"))

    assert alone["default/pa"].decision is with_other_tree["default/pa"].decision \
        is Decision.PREEMPTING
    assert with_other_tree["default/pc"].decision is Decision.ADMITTED
    # The head of tree "two" is checked without removing tree "one"'s victim: no removal
    # beyond those of the preemptor's own checks.
    assert calls == calls_alone
    assert all(keys == ["default/va"] for keys in calls)


def test_a_preemption_elsewhere_does_not_hold_back_a_fit() -> None:
    # A preemption in queue a (within the queue) leaves queue b's admission alone.
    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "2"}}, within=LOWER),
            cluster_queue("b", quotas={"default": {"cpu": "2"}}),
        ],
        admitted_workloads=[admitted("va", "a", priority=-1, cpu="2")],
    )
    result = run_cycle(
        snap,
        [Head(workload("pa", priority=3, cpu="2"), "a"),
         Head(workload("pb", priority=2, cpu="2"), "b")],
        now=0.0,
    )
    decisions = _by_key(result)
    assert decisions["default/pa"].decision is Decision.PREEMPTING
    assert decisions["default/pb"].decision is Decision.ADMITTED
