"""The quota tree: Kueue's formulas for subtree quota, usage, available and limits."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduling.core import FlavorResource, StopPolicy
from scheduling.core.snapshot import (
    QuotaNode,
    Snapshot,
    add_usage,
    available,
    borrowed,
    find_height_of_lowest_subtree_that_fits,
    has_child_over_nominal,
    is_within_nominal,
    local_quota,
    potential_available,
    quantities_fit_in_quota,
    remove_usage,
    usage_in_parent,
)
from scheduling.core.workloads import WorkloadInfo
from tests.builders import admitted, cluster_queue, cohort, snapshot

CPU = FlavorResource("default", "cpu")


def _cq(name: str, nominal: str, bl: str | None = None, ll: str | None = None, parent: str = "co"):
    return cluster_queue(name, quotas={"default": {"cpu": (nominal, bl, ll)}}, cohort=parent)


@dataclass(frozen=True)
class TreeCase:
    name: str
    queues: tuple
    usage: dict[str, str]
    want_available: dict[str, int]
    want_potential: dict[str, int]
    want_cohort_subtree: int
    want_cohort_usage: int
    cohorts: tuple = ()


TREE_CASES = [
    TreeCase(
        name="flat-cohort-borrower-takes-idle-nominal",
        queues=(_cq("a", "10"), _cq("b", "10")),
        usage={"a": "4", "b": "12"},
        want_available={"a": 4000, "b": 4000},
        want_potential={"a": 20000, "b": 20000},
        want_cohort_subtree=20000,
        want_cohort_usage=16000,
    ),
    TreeCase(
        name="lending-limit-keeps-local-quota-guaranteed",
        queues=(_cq("a", "10", ll="4"), _cq("b", "10")),
        usage={"a": "0", "b": "14"},
        want_available={"a": 6000, "b": 0},
        want_potential={"a": 20000, "b": 14000},
        want_cohort_subtree=14000,
        want_cohort_usage=14000,
    ),
    TreeCase(
        name="borrowing-limit-caps-what-the-parent-gives",
        queues=(_cq("a", "10"), _cq("b", "10", bl="2")),
        usage={"a": "0", "b": "0"},
        want_available={"a": 20000, "b": 12000},
        want_potential={"a": 20000, "b": 12000},
        want_cohort_subtree=20000,
        want_cohort_usage=0,
    ),
    TreeCase(
        name="cohort-quota-is-extra-capacity-for-its-subtree",
        queues=(_cq("a", "0"), _cq("b", "0")),
        cohorts=(cohort("co", quotas={"default": {"cpu": "8"}}),),
        usage={"a": "3", "b": "0"},
        want_available={"a": 5000, "b": 5000},
        want_potential={"a": 8000, "b": 8000},
        want_cohort_subtree=8000,
        want_cohort_usage=3000,
    ),
]


@pytest.mark.parametrize("case", TREE_CASES, ids=lambda c: c.name)
def test_quota_tree_formulas(case: TreeCase) -> None:
    # given a cohort whose queues hold the listed usage
    workloads = [admitted(f"{q}-wl", q, cpu=u) for q, u in case.usage.items() if u != "0"]
    snap = snapshot(case.queues, cohorts=case.cohorts, admitted_workloads=workloads)
    # then every formula agrees with Kueue's worked examples
    for name, want in case.want_available.items():
        assert available(snap.cluster_queues[name], CPU) == want
    for name, want in case.want_potential.items():
        assert potential_available(snap.cluster_queues[name], CPU) == want
    assert snap.cohorts["co"].subtree_quota[CPU] == case.want_cohort_subtree
    assert snap.cohorts["co"].usage.get(CPU, 0) == case.want_cohort_usage


def test_hierarchical_cohorts_aggregate_lent_quota_upwards() -> None:
    # root(2) -> child(5, lends 3) -> {lender(10, lends 3), borrower(5)}
    snap = snapshot(
        [
            cluster_queue("lender", quotas={"default": {"cpu": ("10", None, "3")}}, cohort="child"),
            cluster_queue("borrower", quotas={"default": {"cpu": ("5", "10")}}, cohort="child"),
        ],
        cohorts=[
            cohort("root", quotas={"default": {"cpu": "2"}}),
            cohort("child", parent="root", quotas={"default": {"cpu": ("5", None, "3")}}),
        ],
        admitted_workloads=[admitted("used", "borrower", cpu="5")],
    )
    child = snap.cohorts["child"]
    root = snap.cohorts["root"]
    # child keeps lender's 7 local CPUs out of its subtree quota: 5 + 3 + 5
    assert child.subtree_quota[CPU] == 13000
    assert local_quota(child, CPU) == 10000
    # the root sees child's 3 lendable CPUs on top of its own 2
    assert root.subtree_quota[CPU] == 5000
    borrower = snap.cluster_queues["borrower"]
    # borrower: 0 local + min(child's 5 local + root's 5, 5 - 5 + 10) = 10;
    # potential: child's 10 local + root's 5, capped at 5 + 10
    assert available(borrower, CPU) == 10000
    assert potential_available(borrower, CPU) == 15000
    assert find_height_of_lowest_subtree_that_fits(borrower, CPU, 4000) == (1, True)
    assert find_height_of_lowest_subtree_that_fits(borrower, CPU, 9000) == (2, False)


def test_usage_spills_to_the_parent_only_beyond_local_quota() -> None:
    snap = snapshot([_cq("a", "10", ll="4"), _cq("b", "10")])
    a = snap.cluster_queues["a"]
    parent = snap.cohorts["co"]
    add_usage(a, CPU, 8000)
    # 6 CPUs are local (not lendable), only 2 reach the cohort
    assert a.usage[CPU] == 8000
    assert parent.usage[CPU] == 2000
    assert usage_in_parent(a, CPU) == 2000
    assert borrowed(a, CPU) == 0
    add_usage(a, CPU, 4000)
    assert borrowed(a, CPU) == 2000
    remove_usage(a, CPU, 4000)
    remove_usage(a, CPU, 8000)
    assert a.usage[CPU] == 0
    assert parent.usage[CPU] == 0


@pytest.mark.parametrize(
    ("usage", "value", "want"),
    [
        # Within nominal: level 0, and quota above could still be reclaimed.
        pytest.param("0", 2000, (0, True), id="within-nominal-level-0"),
        # The root cohort covers it: level 1, nothing above the root to reclaim from.
        pytest.param("2", 3000, (1, False), id="borrowing-from-the-root-level-1"),
        pytest.param("2", 30000, (1, False), id="nothing-fits-returns-root-height"),
    ],
)
def test_borrowing_level(usage: str, value: int, want: tuple[int, bool]) -> None:
    snap = snapshot(
        [_cq("a", "4"), _cq("b", "4")],
        admitted_workloads=[admitted("x", "a", cpu=usage)] if usage != "0" else [],
    )
    got = find_height_of_lowest_subtree_that_fits(snap.cluster_queues["a"], CPU, value)
    assert got == want


def test_queue_without_cohort_has_level_zero_and_cannot_reclaim() -> None:
    snap = snapshot([cluster_queue("solo", quotas={"default": {"cpu": "4"}})])
    assert find_height_of_lowest_subtree_that_fits(snap.cluster_queues["solo"], CPU, 9000) == (
        0,
        False,
    )


def test_quantities_fit_in_quota_returns_what_must_come_from_above() -> None:
    snap = snapshot([_cq("a", "4", ll="2"), _cq("b", "4")])
    a = snap.cluster_queues["a"]
    fits, remaining = quantities_fit_in_quota(a, {CPU: 3000})
    assert fits is True
    # 2 CPUs are local and free, 1 more must come from the cohort
    assert remaining == {CPU: 1000}
    assert is_within_nominal(a, [CPU]) is True


@pytest.mark.parametrize(
    ("spec", "want_reason"),
    [
        pytest.param(
            cluster_queue("cq", quotas={"missing": {"cpu": "1"}}, cohort="co"),
            "FlavorNotFound",
            id="missing-flavor",
        ),
        pytest.param(
            cluster_queue(
                "cq", quotas={"default": {"cpu": "1"}}, cohort="co", stop_policy=StopPolicy.HOLD
            ),
            "Stopped",
            id="held",
        ),
        pytest.param(
            cluster_queue(
                "cq",
                quotas={"default": {"cpu": "1"}},
                cohort="co",
                stop_policy=StopPolicy.HOLD_AND_DRAIN,
            ),
            "Stopped",
            id="held-and-drained",
        ),
    ],
)
def test_inactive_queues_leave_scheduling_but_keep_counting(spec, want_reason: str) -> None:
    snap = snapshot(
        [spec, _cq("other", "1")],
        flavor_names=["default"],
        admitted_workloads=[admitted("held", "cq", cpu="1")],
    )
    assert snap.inactive == {"cq": want_reason}
    assert "cq" not in snap.cluster_queues
    assert [c.name for c in snap.cohorts["co"].child_cqs] == ["other"]
    # its admitted usage still occupies the cohort
    assert snap.cohorts["co"].usage[CPU] == 1000


def test_cohort_cycle_disables_its_members() -> None:
    snap = snapshot(
        [_cq("looped", "1", parent="x"), _cq("fine", "1", parent="z")],
        cohorts=[cohort("x", parent="y"), cohort("y", parent="x"), cohort("z")],
    )
    assert snap.inactive == {"looped": "HasCycle"}
    assert sorted(snap.cohorts) == ["z"]


def test_implicit_cohorts_exist_without_quota() -> None:
    snap = snapshot([_cq("a", "1", parent="implicit")])
    assert snap.cohorts["implicit"].subtree_quota[CPU] == 1000
    assert snap.cohorts["implicit"].quotas == {}


def test_simulations_always_restore_even_on_error() -> None:
    snap = snapshot(
        [_cq("a", "4"), _cq("b", "4")], admitted_workloads=[admitted("x", "a", cpu="3")]
    )
    a = snap.cluster_queues["a"]
    info = a.workloads["default/x"]
    before = (dict(a.usage), dict(snap.cohorts["co"].usage))
    seen: list[tuple[int, bool]] = []

    def fail_inside() -> None:
        with snap.simulate_workload_removal([info]):
            seen.append((a.usage[CPU], "default/x" in a.workloads))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_inside()
    assert seen == [(0, False)]
    assert (dict(a.usage), dict(snap.cohorts["co"].usage)) == before
    assert "default/x" in a.workloads
    with snap.simulate_usage_addition(a, {CPU: 2000}):
        assert snap.cohorts["co"].usage[CPU] == 5000
    assert (dict(a.usage), dict(snap.cohorts["co"].usage)) == before


def test_clone_is_independent() -> None:
    base = snapshot([_cq("a", "4"), _cq("b", "4")])
    copy = base.clone()
    copy.add_workload(WorkloadInfo(admitted("x", "a", cpu="2")))
    assert copy.cluster_queues["a"].usage[CPU] == 2000
    assert base.cluster_queues["a"].usage.get(CPU, 0) == 0
    assert copy.cluster_queues["a"].parent is copy.cohorts["co"]


def test_release_bumps_the_allocatable_generation() -> None:
    snap = snapshot([_cq("a", "4")], admitted_workloads=[admitted("x", "a", cpu="1")])
    released = snap.release_workload("default/x", "a")
    assert released is not None
    assert snap.cluster_queues["a"].allocatable_generation == 1
    assert snap.release_workload("default/x", "a") is None


def test_an_admitted_workload_given_as_its_info_is_held_as_given() -> None:
    kept = WorkloadInfo(admitted("kept", "a", cpu="3"))
    snap = snapshot([_cq("a", "10"), _cq("b", "10")],
                    admitted_workloads=[kept, admitted("plain", "b", cpu="2")])

    # The same object, so a caller may keep it from one snapshot to the next; the usage
    # counts as that of a workload given plainly.
    assert snap.cluster_queues["a"].workloads["default/kept"] is kept
    assert snap.cluster_queues["a"].usage[CPU] == 3000
    assert snap.cluster_queues["b"].usage[CPU] == 2000
    assert snap.cohorts["co"].usage[CPU] == 5000


def _over_nominal_recounted(snap: Snapshot) -> dict[str, dict[FlavorResource, int]]:
    # What ``over_nominal`` must hold: each cohort's children (queues, active or not, and
    # cohorts) above their subtree quota, counted from scratch.
    out: dict[str, dict[FlavorResource, int]] = {name: {} for name in snap.cohorts}
    children: list[QuotaNode] = [*snap.cohorts.values(), *snap._all_cqs.values()]
    for child in children:
        if child.parent is None:
            continue
        for fr, used in child.usage.items():
            if used > child.subtree_quota.get(fr, 0):
                counts = out[child.parent.name]
                counts[fr] = counts.get(fr, 0) + 1
    return out


def _nonzero(counts: dict[FlavorResource, int]) -> dict[FlavorResource, int]:
    return {fr: n for fr, n in counts.items() if n}


def test_cohorts_count_their_children_above_nominal_as_usage_changes() -> None:
    held = cluster_queue("held", quotas={"default": {"cpu": "4"}}, cohort="left",
                         stop_policy=StopPolicy.HOLD)
    snap = snapshot(
        [_cq("a", "4", ll="2", parent="left"), _cq("b", "4", parent="left"),
         _cq("c", "4", parent="root"), held],
        cohorts=[cohort("left", parent="root"), cohort("root")],
        admitted_workloads=[admitted("b0", "b", cpu="6")],
    )
    assert "held" in snap.inactive
    # Built from the admitted workloads: b borrows, its cohort does not.
    assert _nonzero(snap.cohorts["left"].over_nominal) == {CPU: 1}
    assert _nonzero(snap.cohorts["root"].over_nominal) == {}
    clone = snap.clone()
    steps = [("a", 3000), ("a", 4000), ("c", 9000), ("b", -2000), ("a", -7000),
             ("held", 5000), ("b", -4000), ("c", -9000), ("held", -5000)]
    for name, value in steps:
        node = snap.any_cluster_queue(name)
        assert node is not None
        if value > 0:
            add_usage(node, CPU, value)
        else:
            remove_usage(node, CPU, -value)
        want = _over_nominal_recounted(snap)
        for cohort_name, cohort_node in snap.cohorts.items():
            assert _nonzero(cohort_node.over_nominal) == want[cohort_name], (name, value)
            # No child above nominal may be skipped (an inactive queue above nominal
            # counts too, though it is no scheduling child).
            children = [*cohort_node.child_cohorts, *cohort_node.child_cqs]
            if any(not is_within_nominal(child, [CPU]) for child in children):
                assert has_child_over_nominal(cohort_node, [CPU])
        if name == "held":
            assert has_child_over_nominal(snap.cohorts["left"], [CPU]) is (value > 0)
    assert all(not _nonzero(c.over_nominal) for c in snap.cohorts.values())
    # The clone kept its own counts.
    assert _nonzero(clone.cohorts["left"].over_nominal) == {CPU: 1}
