"""Flavor assignment: flavor order, fungibility, borrowing, preemption modes, scan resumption."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduling.core import (
    AssignmentMode,
    AssignmentState,
    ClusterQueueSpec,
    FlavorResource,
    FungibilityPolicy,
    FungibilityPreference,
    WithinClusterQueuePolicy,
    Workload,
)
from scheduling.core.flavors import FlavorAssigner, PreemptionPossibility
from scheduling.core.preemption import Preemptor
from scheduling.core.snapshot import ClusterQueueNode
from scheduling.core.workloads import WorkloadInfo
from tests.builders import admitted, cluster_queue, pod_set, snapshot, workload

TRY_NEXT = FungibilityPolicy.TRY_NEXT_FLAVOR
MAY_STOP = FungibilityPolicy.MAY_STOP_SEARCH


class StubOracle:
    """Answers preemption questions from a table, like Kueue's test oracle."""

    def __init__(self, answers: dict[FlavorResource, tuple[PreemptionPossibility, int]]) -> None:
        self.answers = answers
        self.asked: list[tuple[FlavorResource, int]] = []

    def simulate_preemption(
        self, cq: ClusterQueueNode, info: WorkloadInfo, fr: FlavorResource, quantity: int
    ) -> tuple[PreemptionPossibility, int]:
        self.asked.append((fr, quantity))
        return self.answers.get(fr, (PreemptionPossibility.PREEMPT, 0))


@dataclass(frozen=True)
class Case:
    name: str
    cq: ClusterQueueSpec
    wl: Workload
    want_mode: AssignmentMode
    want_flavors: dict[str, str]
    want_borrowing: int = 0
    want_message: str = ""
    others: tuple[ClusterQueueSpec, ...] = ()
    usage: tuple[Workload, ...] = ()
    oracle: dict[FlavorResource, tuple[PreemptionPossibility, int]] | None = None
    want_no_fit_reason: str = ""
    fair_sharing: bool = False


def _fr(flavor: str, resource: str = "cpu") -> FlavorResource:
    return FlavorResource(flavor, resource)


CASES = [
    Case(
        name="single-flavor-fits",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "2", "memory": "2Mi"}}),
        wl=workload("w", cpu="1", memory="1Mi"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "default", "memory": "default"},
    ),
    Case(
        name="first-flavor-exceeds-max-capacity-second-fits",
        cq=cluster_queue("cq", quotas={"one": {"cpu": "4"}, "two": {"cpu": "10"}}),
        wl=workload("w", cpu="6"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two"},
    ),
    Case(
        name="no-preemption-candidates-tries-next-flavor",
        cq=cluster_queue("cq", quotas={"one": {"cpu": "8"}, "two": {"cpu": "10"}}),
        usage=(admitted("used", "cq", "one", cpu="5"),),
        wl=workload("w", cpu="6"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two"},
    ),
    Case(
        name="preempt-mode-without-candidates-when-no-other-flavor",
        cq=cluster_queue("cq", quotas={"one": {"cpu": "8"}}),
        usage=(admitted("used", "cq", "one", cpu="5"),),
        wl=workload("w", cpu="6"),
        want_mode=AssignmentMode.PREEMPT,
        want_flavors={"cpu": "one"},
        want_message=(
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor one, 3 more needed"
        ),
    ),
    Case(
        name="preemption-candidates-but-try-next-flavor-fits",
        cq=cluster_queue(
            "cq",
            quotas={"one": {"cpu": "4"}, "two": {"cpu": "4"}},
            within=WithinClusterQueuePolicy.LOWER_PRIORITY,
        ),
        usage=(admitted("low", "cq", "one", priority=-1, cpu="4"),),
        wl=workload("w", cpu="2"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two"},
    ),
    Case(
        name="may-stop-search-preempts-in-first-flavor",
        cq=cluster_queue(
            "cq",
            quotas={"one": {"cpu": "4"}, "two": {"cpu": "4"}},
            within=WithinClusterQueuePolicy.LOWER_PRIORITY,
            when_can_preempt=MAY_STOP,
        ),
        usage=(admitted("low", "cq", "one", priority=-1, cpu="4"),),
        wl=workload("w", cpu="2"),
        want_mode=AssignmentMode.PREEMPT,
        want_flavors={"cpu": "one"},
        want_message=(
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor one, 2 more needed"
        ),
    ),
    Case(
        name="borrowing-stops-at-first-flavor-by-default",
        cq=cluster_queue("cq", quotas={"one": {"cpu": "2"}, "two": {"cpu": "4"}}, cohort="co"),
        others=(cluster_queue("lender", quotas={"one": {"cpu": "4"}}, cohort="co"),),
        wl=workload("w", cpu="3"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "one"},
        want_borrowing=1,
    ),
    Case(
        name="when-can-borrow-try-next-flavor-avoids-borrowing",
        cq=cluster_queue(
            "cq",
            quotas={"one": {"cpu": "2"}, "two": {"cpu": "4"}},
            cohort="co",
            when_can_borrow=TRY_NEXT,
        ),
        others=(cluster_queue("lender", quotas={"one": {"cpu": "4"}}, cohort="co"),),
        wl=workload("w", cpu="3"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two"},
    ),
    Case(
        name="borrowing-over-preemption-borrows-in-second-flavor",
        cq=cluster_queue(
            "cq",
            quotas={"one": {"cpu": ("4", "0")}, "two": {"cpu": ("0", "4")}},
            cohort="co",
            when_can_borrow=TRY_NEXT,
            preference=FungibilityPreference.BORROWING_OVER_PREEMPTION,
        ),
        others=(cluster_queue("lender", quotas={"two": {"cpu": "4"}}, cohort="co"),),
        wl=workload("w", cpu="4"),
        usage=(admitted("low", "cq", "one", cpu="4"),),
        oracle={_fr("one"): (PreemptionPossibility.PREEMPT, 0)},
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two"},
        want_borrowing=1,
    ),
    Case(
        name="preemption-over-borrowing-preempts-in-first-flavor",
        cq=cluster_queue(
            "cq",
            quotas={"one": {"cpu": ("4", "0")}, "two": {"cpu": ("0", "4")}},
            cohort="co",
            when_can_borrow=TRY_NEXT,
            preference=FungibilityPreference.PREEMPTION_OVER_BORROWING,
        ),
        others=(cluster_queue("lender", quotas={"two": {"cpu": "4"}}, cohort="co"),),
        wl=workload("w", cpu="4"),
        usage=(admitted("low", "cq", "one", cpu="4"),),
        oracle={_fr("one"): (PreemptionPossibility.PREEMPT, 0)},
        want_mode=AssignmentMode.PREEMPT,
        want_flavors={"cpu": "one"},
        want_message=(
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor one, 4 more needed"
        ),
    ),
    Case(
        name="pods-resource-is-charged-automatically",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "10", "pods": "2"}}),
        wl=workload("w", count=3, cpu="1"),
        want_mode=AssignmentMode.NO_FIT,
        want_flavors={},
        want_message=(
            "couldn't assign flavors to pod set main: insufficient quota for pods in flavor "
            "default, previously considered podsets requests (0) + current podset request (3) "
            "> maximum capacity (2)"
        ),
        want_no_fit_reason="ExceedsMaxQuota",
    ),
    Case(
        name="zero-request-of-uncovered-resource-is-ignored",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "1"}}),
        wl=workload("w", cpu="1", example_com__gpu="0"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "default"},
    ),
    Case(
        name="uncovered-resource-is-no-fit",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "1"}}),
        wl=workload("w", cpu="1", example_com__gpu="1"),
        want_mode=AssignmentMode.NO_FIT,
        want_flavors={},
        want_message=(
            "couldn't assign flavors to pod set main: resource example.com/gpu unavailable "
            "in ClusterQueue"
        ),
        want_no_fit_reason="NoMatchingFlavor",
    ),
    Case(
        name="borrowing-needing-preemption-without-policy-is-no-fit",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "1"}}, cohort="co"),
        others=(cluster_queue("other", quotas={"default": {"cpu": "1"}}, cohort="co"),),
        usage=(admitted("x", "other", cpu="1"),),
        wl=workload("w", cpu="2"),
        want_mode=AssignmentMode.NO_FIT,
        want_flavors={},
        want_message=(
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor default, 1 more needed"
        ),
        want_no_fit_reason="WaitingForQuota",
    ),
    Case(
        name="resource-groups-are-assigned-independently",
        cq=cluster_queue(
            "cq",
            groups=[
                {"one": {"cpu": "2", "memory": "1Gi"}, "two": {"cpu": "4", "memory": "15Mi"}},
                {"b-one": {"example.com/gpu": "4"}},
            ],
        ),
        wl=workload("w", cpu="3", memory="10Mi", example_com__gpu="3"),
        want_mode=AssignmentMode.FIT,
        want_flavors={"cpu": "two", "memory": "two", "example.com/gpu": "b-one"},
    ),
]


def _assign(case: Case, last: AssignmentState | None = None):
    snap = snapshot([case.cq, *case.others], admitted_workloads=case.usage)
    node = snap.cluster_queues[case.cq.name]
    oracle = (
        StubOracle(case.oracle)
        if case.oracle is not None
        else Preemptor(snap, fair_sharing=case.fair_sharing, now=0.0)
    )
    info = WorkloadInfo(case.wl, node.name)
    return FlavorAssigner(
        info,
        node,
        snap.flavors,
        fair_sharing=case.fair_sharing,
        oracle=oracle,
        last_assignment=last,
        scheduling_cycle=1,
    ).assign()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_assign_flavors(case: Case) -> None:
    assignment = _assign(case)
    assert assignment.mode is case.want_mode
    assert {r: fa.flavor for ps in assignment.pod_sets for r, fa in ps.flavors.items()} == (
        case.want_flavors
    )
    assert assignment.borrowing == case.want_borrowing
    assert assignment.message() == case.want_message
    assert assignment.no_fit_reason == case.want_no_fit_reason


def test_scan_resumes_after_the_last_tried_flavor() -> None:
    case = Case(
        name="resume",
        cq=cluster_queue(
            "cq", quotas={"one": {"cpu": "4"}, "two": {"cpu": "4"}, "three": {"cpu": "4"}}
        ),
        wl=workload("w", cpu="1"),
        want_mode=AssignmentMode.FIT,
        want_flavors={},
    )
    first = _assign(case)
    # the first flavor fits and was the last one examined: index 0 recorded
    assert first.pod_sets[0].flavors["cpu"].flavor == "one"
    assert first.last_state.last_tried_flavor_idx == ({"cpu": 0},)
    resumed = _assign(case, last=first.last_state)
    assert resumed.pod_sets[0].flavors["cpu"].flavor == "two"
    # reaching the last flavor resets the scan for next time
    again = _assign(case, last=resumed.last_state)
    assert again.pod_sets[0].flavors["cpu"].flavor == "three"
    assert again.last_state.last_tried_flavor_idx == ({"cpu": -1},)
    assert again.last_state.pending_flavors() is False


def test_partial_counts_scale_requests() -> None:
    case = Case(
        name="scaled",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "10"}}),
        wl=workload("w", pod_sets=[pod_set("main", 8, min_count=2, cpu="2")]),
        want_mode=AssignmentMode.FIT,
        want_flavors={},
    )
    snap = snapshot([case.cq])
    node = snap.cluster_queues["cq"]
    assigner = FlavorAssigner(
        WorkloadInfo(case.wl, "cq"),
        node,
        snap.flavors,
        fair_sharing=False,
        oracle=Preemptor(snap, fair_sharing=False, now=0.0),
        last_assignment=None,
        scheduling_cycle=1,
    )
    assert assigner.assign().mode is AssignmentMode.NO_FIT
    partial = assigner.assign([5])
    assert partial.mode is AssignmentMode.FIT
    assert partial.usage == {FlavorResource("default", "cpu"): 10000}
    admission = partial.to_admission("cq")
    assert admission.pod_sets[0].count == 5
    assert admission.pod_sets[0].resource_usage == {"cpu": 10000}


def test_oracle_is_only_asked_when_preemption_could_help() -> None:
    oracle_answers = {_fr("default"): (PreemptionPossibility.NO_CANDIDATES, 0)}
    case = Case(
        name="ask",
        cq=cluster_queue("cq", quotas={"default": {"cpu": "4"}}),
        usage=(admitted("x", "cq", cpu="3"),),
        wl=workload("w", cpu="2"),
        oracle=oracle_answers,
        want_mode=AssignmentMode.PREEMPT,
        want_flavors={"cpu": "default"},
    )
    snap = snapshot([case.cq], admitted_workloads=case.usage)
    node = snap.cluster_queues["cq"]
    oracle = StubOracle(oracle_answers)
    FlavorAssigner(
        WorkloadInfo(case.wl, "cq"),
        node,
        snap.flavors,
        fair_sharing=False,
        oracle=oracle,
        last_assignment=None,
        scheduling_cycle=1,
    ).assign()
    assert oracle.asked == [(_fr("default"), 2000)]
