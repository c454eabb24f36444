"""The production admission path decides as the pure engine does.

Random small scenarios (flavors, cohorts nested or not, cluster queues covering one or
two resources with nominal, borrowing and lending quotas, both queueing strategies,
preemption policies, priorities, admitted and pending workloads) run through the pure engine (``run_scenario_in_engine``:
``QueueManager`` and ``run_cycle``) and through the reconciler on real rows
(``run_scenario``); the admissions (flavors and counts), the preemptions and the pending
sets must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tools.conformance import load_scenario, run_scenario, run_scenario_in_engine

pytestmark = pytest.mark.django_db

FLAVORS = ("f0", "f1")
PRIORITIES = st.sampled_from((0, 0, 1, 2))


@st.composite
def _cohorts(draw: st.DrawFn) -> list[dict[str, Any]]:
    shape = draw(st.sampled_from(("none", "flat", "nested")))
    if shape == "none":
        return []
    cohorts: list[dict[str, Any]] = [{"name": "root", "parent": None}]
    if shape == "nested":
        cohorts.append({"name": "child", "parent": "root"})
    for cohort in cohorts:
        if draw(st.booleans()):
            cohort["resourceGroups"] = [{
                "coveredResources": ["cpu"],
                "flavors": [{"name": "f0", "resources": [
                    {"name": "cpu", "nominalQuota": str(draw(st.integers(0, 3)))}]}],
            }]
    return cohorts


# What a quota unit of each resource is, as a quantity.
UNITS = {"cpu": "", "memory": "Gi", "pods": ""}


@st.composite
def _cluster_queue(draw: st.DrawFn, name: str, cohorts: list[str],
                   covered: list[str]) -> dict[str, Any]:
    cohort = draw(st.sampled_from([None, *cohorts])) if cohorts else None
    flavors = draw(st.permutations(FLAVORS))[: draw(st.integers(1, 2))]
    resources = []
    for flavor in flavors:
        quotas = []
        for resource in covered:
            nominal = draw(st.integers(0, 6))
            quota: dict[str, Any] = {"name": resource,
                                     "nominalQuota": f"{nominal}{UNITS[resource]}"}
            if cohort is not None:
                borrowing = draw(st.none() | st.integers(0, 4))
                lending = draw(st.none() | st.integers(0, nominal))
                quota.update(
                    borrowingLimit=None if borrowing is None else f"{borrowing}{UNITS[resource]}",
                    lendingLimit=None if lending is None else f"{lending}{UNITS[resource]}")
            quotas.append(quota)
        resources.append({"name": flavor, "resources": quotas})
    reclaim = draw(st.sampled_from(("Never", "LowerPriority", "Any")))
    # The API rejects a borrowWithinCohort policy with reclaimWithinCohort Never.
    borrow = "Never" if reclaim == "Never" else draw(st.sampled_from(("Never", "LowerPriority")))
    return {
        "name": name,
        "cohort": cohort,
        "queueingStrategy": draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
        "preemption": {
            "withinClusterQueue": draw(st.sampled_from(
                ("Never", "LowerPriority", "LowerOrNewerEqualPriority"))),
            "reclaimWithinCohort": reclaim,
            "borrowWithinCohort": {"policy": borrow, "maxPriorityThreshold": None},
        },
        "flavorFungibility": {
            "whenCanBorrow": draw(st.sampled_from(("Borrow", "TryNextFlavor"))),
            "whenCanPreempt": draw(st.sampled_from(("Preempt", "TryNextFlavor"))),
        },
        "resourceGroups": [{"coveredResources": covered, "flavors": resources}],
    }


@st.composite
def _pod_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 3))
    # "pods" is never requested: a queue that covers it charges one per pod.
    requests = {"cpu": str(draw(st.integers(1, 3)))}
    if draw(st.booleans()):
        requests["memory"] = f"{draw(st.integers(0, 3))}Gi"
    pod_set: dict[str, Any] = {"name": "main", "count": count, "requests": requests}
    if count > 1 and draw(st.booleans()):
        pod_set["minCount"] = draw(st.integers(1, count - 1))
    return [pod_set]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    cohorts = draw(_cohorts())
    names = [f"cq{i}" for i in range(draw(st.integers(1, 3)))]
    covered = draw(st.sampled_from((["cpu"], ["cpu", "memory"], ["cpu", "pods"])))
    cqs = [draw(_cluster_queue(name, [c["name"] for c in cohorts], covered)) for name in names]
    admitted = []
    for i in range(draw(st.integers(0, 3))):
        cq = draw(st.sampled_from(cqs))
        flavor = draw(st.sampled_from(
            [f["name"] for f in cq["resourceGroups"][0]["flavors"]]))
        pod_sets = draw(_pod_sets())
        admitted.append({
            "name": f"a{i}", "namespace": "ns", "queue": f"lq-{cq['name']}",
            "priority": draw(PRIORITIES), "created": -100 + i,
            "admittedAt": draw(st.integers(-50, -1)),
            "podSets": pod_sets,
            "admission": {"clusterQueue": cq["name"], "podSets": [
                {"name": "main", "flavors": dict.fromkeys(covered, flavor),
                 "count": pod_sets[0]["count"]}]},
        })
    created = draw(st.lists(st.integers(0, 20), min_size=1, max_size=4, unique=True))
    pending = [{
        "name": f"p{i}", "namespace": "ns", "queue": f"lq-{draw(st.sampled_from(names))}",
        "priority": draw(PRIORITIES), "created": at, "podSets": draw(_pod_sets()),
    } for i, at in enumerate(created)]
    return {
        "name": "differential",
        "cycles": draw(st.sampled_from((None, "until-stable"))),
        "flavors": [{"name": f} for f in FLAVORS],
        "cohorts": cohorts,
        "clusterQueues": cqs,
        "localQueues": [{"namespace": "ns", "name": f"lq-{n}", "clusterQueue": n} for n in names],
        "config": {"fairSharing": draw(st.booleans())},
        "admitted": admitted,
        "pending": pending,
    }


# Found by this test: a workload admitted before the run, preempted and admitted again on
# another flavor was reported among the engine's admissions, which partition the pending
# list.
READMITTED_VICTIM: dict[str, Any] = {
    "name": "readmitted-victim",
    "cycles": "until-stable",
    "flavors": [{"name": "f0"}, {"name": "f1"}],
    "clusterQueues": [{
        "name": "cq0", "cohort": None,
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "f0", "resources": [{"name": "cpu", "nominalQuota": "2"}]},
            {"name": "f1", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}],
    }],
    "localQueues": [{"namespace": "ns", "name": "lq-cq0", "clusterQueue": "cq0"}],
    "admitted": [{
        "name": "a0", "namespace": "ns", "queue": "lq-cq0", "priority": 0,
        "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
        "admission": {"clusterQueue": "cq0",
                      "podSets": [{"name": "main", "flavors": {"cpu": "f0"}, "count": 1}]},
    }],
    "pending": [{"name": "p0", "namespace": "ns", "queue": "lq-cq0", "priority": 1,
                 "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "2"}}]}],
}


def test_a_preempted_victim_admitted_again_is_not_an_admission_of_the_outcome() -> None:
    outcome = run_scenario(load_scenario(READMITTED_VICTIM))
    assert outcome == {
        "admitted": {"ns/p0": {"clusterQueue": "cq0", "podSets": [
            {"name": "main", "flavors": {"cpu": "f0"}, "count": 1}]}},
        "preempted": ["ns/a0"],
        "pending": [],
    }


@example(document=READMITTED_VICTIM)
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=scenarios())
def test_the_admission_path_decides_as_the_engine(document: dict[str, Any]) -> None:
    scenario = load_scenario(document)
    assert run_scenario(scenario) == run_scenario_in_engine(scenario)
