"""Choosing victims: classical policies, hierarchical reclaim, borrowWithinCohort, fair sharing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from scheduling.core import (
    AssignmentMode,
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FairSharingStrategy,
    ReclaimWithinCohortPolicy,
    WithinClusterQueuePolicy,
    Workload,
    satisfies_preemption_policy,
)
from scheduling.core.flavors import FlavorAssigner
from scheduling.core.preemption import DEFAULT_FAIR_SHARING_STRATEGIES, Preemptor, Target
from scheduling.core.workloads import WorkloadInfo
from tests.builders import admitted, cluster_queue, cohort, snapshot, workload

LOWER = WithinClusterQueuePolicy.LOWER_PRIORITY
NEWER = WithinClusterQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
RECLAIM_ANY = ReclaimWithinCohortPolicy.ANY
RECLAIM_LOWER = ReclaimWithinCohortPolicy.LOWER_PRIORITY


@dataclass(frozen=True)
class Case:
    name: str
    queues: tuple[ClusterQueueSpec, ...]
    running: tuple[Workload, ...]
    incoming: Workload
    target: str
    want: tuple[tuple[str, str], ...]
    cohorts: tuple[CohortSpec, ...] = ()
    fair_sharing: bool = False
    strategies: tuple[FairSharingStrategy, ...] = DEFAULT_FAIR_SHARING_STRATEGIES


def _standalone() -> ClusterQueueSpec:
    return cluster_queue("standalone", quotas={"default": {"cpu": "6"}}, within=LOWER)


def _three(**kw: object) -> tuple[ClusterQueueSpec, ...]:
    return tuple(
        cluster_queue(n, quotas={"default": {"cpu": "3"}}, cohort="all", **kw)  # type: ignore[arg-type]
        for n in ("a", "b", "c")
    )


CLASSICAL = [
    Case(
        name="preempt-lowest-priority",
        queues=(_standalone(),),
        running=(
            admitted("low", "standalone", priority=-1, cpu="2"),
            admitted("mid", "standalone", priority=0, cpu="2"),
            admitted("high", "standalone", priority=1, cpu="2"),
        ),
        incoming=workload("in", priority=1, cpu="2"),
        target="standalone",
        want=(("default/low", "InClusterQueue"),),
    ),
    Case(
        name="preempt-as-many-as-needed",
        queues=(_standalone(),),
        running=(
            admitted("low", "standalone", priority=-1, cpu="2"),
            admitted("mid", "standalone", priority=0, cpu="2"),
            admitted("high", "standalone", priority=1, cpu="2"),
        ),
        incoming=workload("in", priority=1, cpu="3"),
        target="standalone",
        want=(("default/low", "InClusterQueue"), ("default/mid", "InClusterQueue")),
    ),
    Case(
        name="minimal-set-excludes-low-priority-after-fill-back",
        queues=(_standalone(),),
        running=(
            admitted("low", "standalone", priority=-1, cpu="1"),
            admitted("mid", "standalone", priority=0, cpu="2"),
            admitted("high", "standalone", priority=1, cpu="3"),
        ),
        incoming=workload("in", priority=1, cpu="2"),
        target="standalone",
        want=(("default/mid", "InClusterQueue"),),
    ),
    Case(
        name="not-enough-lower-priority-work-preempts-nothing",
        queues=(_standalone(),),
        running=(
            admitted("low", "standalone", priority=-1, cpu="3"),
            admitted("mid", "standalone", priority=0, cpu="3"),
        ),
        incoming=workload("in", priority=0, cpu="4"),
        target="standalone",
        want=(),
    ),
    Case(
        name="newer-equal-priority-is-preempted",
        queues=(cluster_queue("q", quotas={"default": {"cpu": "2"}}, within=NEWER),),
        running=(admitted("newer", "q", cpu="2"),),
        incoming=workload("in", cpu="2", created=-10),
        target="q",
        want=(("default/newer", "InClusterQueue"),),
    ),
    Case(
        name="reclaim-from-borrowing-queue-in-cohort",
        queues=(
            cluster_queue("c1", quotas={"default": {"cpu": "6"}}, cohort="co", reclaim=RECLAIM_ANY),
            cluster_queue("c2", quotas={"default": {"cpu": "6"}}, cohort="co"),
        ),
        running=(
            admitted("c2-a", "c2", cpu="4"),
            admitted("c2-b", "c2", cpu="4"),
            admitted("c1-a", "c1", cpu="2"),
        ),
        incoming=workload("in", cpu="4"),
        target="c1",
        # equal candidates: the UID (here the name) breaks the tie
        want=(("default/c2-a", "InCohortReclamation"),),
    ),
    Case(
        name="queues-within-nominal-are-never-reclaimed-from",
        queues=(
            cluster_queue("c1", quotas={"default": {"cpu": "6"}}, cohort="co", reclaim=RECLAIM_ANY),
            cluster_queue("c2", quotas={"default": {"cpu": "6"}}, cohort="co"),
        ),
        running=(admitted("c2-a", "c2", cpu="6"), admitted("c1-a", "c1", cpu="6")),
        incoming=workload("in", cpu="1"),
        target="c1",
        want=(),
    ),
    Case(
        name="borrow-within-cohort-reclaims-below-threshold-while-borrowing",
        queues=(
            cluster_queue(
                "a",
                quotas={"default": {"cpu": ("1", "12")}},
                cohort="shared",
                reclaim=RECLAIM_LOWER,
                borrow_within_cohort=BorrowWithinCohortPolicy.LOWER_PRIORITY,
                threshold=0,
            ),
            cluster_queue("b", quotas={"default": {"cpu": ("1", "12")}}, cohort="shared"),
            cluster_queue("bank", quotas={"default": {"cpu": "10"}}, cohort="shared"),
        ),
        running=(
            admitted("b-low", "b", priority=-1, cpu="6"),
            admitted("b-mid", "b", priority=1, cpu="6"),
        ),
        incoming=workload("in", priority=2, cpu="3"),
        target="a",
        want=(("default/b-low", "InCohortReclaimWhileBorrowing"),),
    ),
    Case(
        name="above-threshold-is-not-preempted-while-borrowing",
        queues=(
            cluster_queue(
                "a",
                quotas={"default": {"cpu": ("1", "12")}},
                cohort="shared",
                reclaim=RECLAIM_LOWER,
                borrow_within_cohort=BorrowWithinCohortPolicy.LOWER_PRIORITY,
                threshold=0,
            ),
            cluster_queue("b", quotas={"default": {"cpu": ("1", "12")}}, cohort="shared"),
            cluster_queue("bank", quotas={"default": {"cpu": "10"}}, cohort="shared"),
        ),
        running=(admitted("b-mid", "b", priority=1, cpu="12"),),
        incoming=workload("in", priority=2, cpu="3"),
        target="a",
        want=(),
    ),
    Case(
        name="hierarchical-advantage-reclaims-own-subtree-quota",
        cohorts=(
            cohort("r"),
            cohort("c", parent="r", quotas={"default": {"cpu": "2"}}),
        ),
        queues=(
            cluster_queue(
                "q", quotas={"default": {"cpu": "0"}}, cohort="c", within=LOWER, reclaim=RECLAIM_ANY
            ),
            cluster_queue("q-borrowing", quotas={"default": {"cpu": "0"}}, cohort="r"),
        ),
        running=(admitted("admitted2", "q-borrowing", cpu="2"),),
        incoming=workload("in", cpu="2"),
        target="q",
        want=(("default/admitted2", "InCohortReclamation"),),
    ),
    Case(
        name="lending-limit-bounds-what-can-be-reclaimed",
        queues=(
            cluster_queue(
                "lend1",
                quotas={"default": {"cpu": ("6", None, "4")}},
                cohort="lend",
                within=LOWER,
                reclaim=RECLAIM_LOWER,
            ),
            cluster_queue("lend2", quotas={"default": {"cpu": ("6", None, "2")}}, cohort="lend"),
        ),
        running=(admitted("lend2-low", "lend2", priority=-1, cpu="8"),),
        incoming=workload("in", priority=1, cpu="9"),
        target="lend1",
        want=(),
    ),
]

FAIR = [
    Case(
        name="fair-reclaims-from-the-queue-with-the-highest-share",
        queues=_three(within=LOWER, reclaim=RECLAIM_ANY),
        running=(
            admitted("a1", "a", cpu="1"),
            *(admitted(f"b{i}", "b", cpu="1") for i in range(1, 6)),
            *(admitted(f"c{i}", "c", cpu="1") for i in range(1, 4)),
        ),
        incoming=workload("in", cpu="2"),
        target="a",
        # a stays within nominal with the incoming workload: it reclaims from the
        # borrowing queue without comparing shares, until it fits
        want=(("default/b1", "InCohortReclamation"), ("default/b2", "InCohortReclamation")),
        fair_sharing=True,
    ),
    Case(
        name="fair-cannot-preempt-when-everyone-is-within-nominal",
        queues=_three(within=LOWER, reclaim=RECLAIM_ANY),
        running=tuple(admitted(f"{q}{i}", q, cpu="1") for q in "abc" for i in range(1, 4)),
        incoming=workload("in", cpu="1"),
        target="a",
        want=(),
        fair_sharing=True,
    ),
    Case(
        name="fair-higher-weight-preempts-more",
        queues=(
            cluster_queue(
                "a",
                quotas={"default": {"cpu": "3"}},
                cohort="all",
                within=LOWER,
                reclaim=RECLAIM_ANY,
                weight=2.0,
            ),
            *_three(within=LOWER, reclaim=RECLAIM_ANY)[1:],
        ),
        running=(
            *(admitted(f"a{i}", "a", cpu="1") for i in range(1, 4)),
            *(admitted(f"b{i}", "b", cpu="1") for i in range(1, 7)),
        ),
        incoming=workload("in", cpu="2"),
        target="a",
        want=(("default/b1", "InCohortFairSharing"), ("default/b2", "InCohortFairSharing")),
        fair_sharing=True,
    ),
    Case(
        name="fair-in-queue-preemption-without-cohort",
        queues=(cluster_queue("solo", quotas={"default": {"cpu": "4"}}, within=LOWER),),
        running=(admitted("low", "solo", priority=-1, cpu="4"),),
        incoming=workload("in", priority=100, cpu="4"),
        target="solo",
        want=(("default/low", "InClusterQueue"),),
        fair_sharing=True,
    ),
]


def _targets(case: Case) -> tuple[tuple[str, str], ...]:
    snap = snapshot(case.queues, cohorts=case.cohorts, admitted_workloads=case.running)
    node = snap.cluster_queues[case.target]
    preemptor = Preemptor(
        snap, fair_sharing=case.fair_sharing, strategies=case.strategies, now=100.0
    )
    info = WorkloadInfo(case.incoming, case.target)
    before = {n: dict(q.usage) for n, q in snap.cluster_queues.items()}
    assignment = FlavorAssigner(
        info,
        node,
        snap.flavors,
        fair_sharing=case.fair_sharing,
        oracle=preemptor,
        last_assignment=None,
        scheduling_cycle=1,
    ).assign()
    targets = (
        preemptor.get_targets(info, assignment) if assignment.mode is AssignmentMode.PREEMPT else []
    )
    # every simulation restored the snapshot
    assert {n: dict(q.usage) for n, q in snap.cluster_queues.items()} == before
    return tuple(sorted((t.info.key, t.reason) for t in targets))


@pytest.mark.parametrize("case", CLASSICAL + FAIR, ids=lambda c: c.name)
def test_preemption_targets(case: Case) -> None:
    assert _targets(case) == case.want


@pytest.mark.parametrize(
    ("policy", "preemptor_priority", "candidate_priority", "preemptor_newer", "want"),
    [
        pytest.param("Never", 9, 0, False, False, id="never"),
        pytest.param("LowerPriority", 1, 0, False, True, id="lower-priority"),
        pytest.param("LowerPriority", 0, 0, False, False, id="equal-priority-is-not-lower"),
        pytest.param("LowerOrNewerEqualPriority", 0, 0, False, True, id="newer-equal"),
        pytest.param("LowerOrNewerEqualPriority", 0, 0, True, False, id="older-equal"),
        pytest.param("Any", -5, 5, False, True, id="any"),
    ],
)
def test_preemption_policies(
    policy: str,
    preemptor_priority: int,
    candidate_priority: int,
    preemptor_newer: bool,
    want: bool,
) -> None:
    preemptor = workload("p", priority=preemptor_priority, created=10 if preemptor_newer else 0)
    candidate = workload("c", priority=candidate_priority, created=5)
    assert satisfies_preemption_policy(preemptor, candidate, policy) is want


def test_a_queue_that_starts_borrowing_in_a_clone_offers_victims() -> None:
    # b is within nominal when the snapshot is built; in the clone it borrows, and the
    # search (which skips cohorts whose children are all within nominal) must see it.
    queues = tuple(
        cluster_queue(n, quotas={"default": {"cpu": "3"}}, cohort="all", reclaim=RECLAIM_ANY)
        for n in ("a", "b")
    )
    snap = snapshot(queues, admitted_workloads=[admitted("b-1", "b", cpu="3")]).clone()
    preemptor = Preemptor(snap, fair_sharing=False, now=100.0)
    info = WorkloadInfo(workload("incoming", cpu="3"), "a")
    assignment = FlavorAssigner(
        info, snap.cluster_queues["a"], snap.flavors, fair_sharing=False, oracle=preemptor,
        last_assignment=None, scheduling_cycle=1,
    ).assign()
    assert assignment.mode is AssignmentMode.FIT
    snap.add_workload(WorkloadInfo(admitted("b-2", "b", cpu="2", admitted_at=50.0)))
    assignment = FlavorAssigner(
        info, snap.cluster_queues["a"], snap.flavors, fair_sharing=False, oracle=preemptor,
        last_assignment=None, scheduling_cycle=1,
    ).assign()
    assert assignment.mode is AssignmentMode.PREEMPT
    targets = preemptor.get_targets(info, assignment)
    assert [t.info.key for t in targets] == ["default/b-2"]


def test_searches_are_reused_only_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = tuple(
        cluster_queue(n, quotas={"default": {"cpu": "3"}}, cohort="all", reclaim=RECLAIM_ANY)
        for n in ("a", "b")
    )
    snap = snapshot(queues, admitted_workloads=[
        admitted("b-1", "b", cpu="3"), admitted("b-2", "b", cpu="2", admitted_at=50.0)])
    preemptor = Preemptor(snap, fair_sharing=False, now=100.0)
    searches: list[object] = []
    search = preemptor._search

    def counted(ctx: Any) -> list[Target]:
        searches.append(ctx)
        return search(ctx)

    monkeypatch.setattr(preemptor, "_search", counted)
    info = WorkloadInfo(workload("incoming", cpu="3"), "a")

    def assign_and_target() -> list[str]:
        assignment = FlavorAssigner(
            info, snap.cluster_queues["a"], snap.flavors, fair_sharing=False,
            oracle=preemptor, last_assignment=None, scheduling_cycle=1,
        ).assign()
        assert assignment.mode is AssignmentMode.PREEMPT
        return [t.info.key for t in preemptor.get_targets(info, assignment)]

    with preemptor.reusing_searches():
        assert assign_and_target() == ["default/b-2"]
    # The assigner's question and the victims' search were one search.
    assert len(searches) == 1
    assert assign_and_target() == ["default/b-2"]
    assert len(searches) == 3
    # Outside the block a changed snapshot gets a fresh answer.
    snap.remove_workload(snap.cluster_queues["b"].workloads["default/b-2"])
    snap.add_workload(WorkloadInfo(admitted("b-3", "b", cpu="2", admitted_at=60.0)))
    assert assign_and_target() == ["default/b-3"]
