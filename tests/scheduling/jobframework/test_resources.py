"""Requests adjusted for LimitRanges and RuntimeClasses, and checked against them, as Kueue's
``pkg/workload/resources.go`` and ``pkg/util/limitrange`` do."""

from __future__ import annotations

from typing import Any

from scheduling.jobframework.podsets import pod_requests
from scheduling.jobframework.resources import (
    adjust_pod_sets,
    adjust_pod_spec,
    admissibility_error,
    summarize,
)


def container(requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources}


def test_summarize_keeps_the_lowest_max_the_highest_min_and_the_first_default() -> None:
    """Kueue ``limitrange.Summarize``."""
    summary = summarize([
        [{"type": "Container", "max": {"cpu": "4"}, "min": {"cpu": "100m"},
          "default": {"cpu": "1"}}],
        [{"type": "Container", "max": {"cpu": "2", "memory": "1Gi"}, "min": {"cpu": "200m"},
          "default": {"cpu": "3", "memory": "512Mi"}}],
    ])
    item = summary["Container"]
    assert {k: str(v) for k, v in item.max.items()} == {"cpu": "2", "memory": str(2**30)}
    assert {k: str(v) for k, v in item.min.items()} == {"cpu": "1/5"}
    assert item.default == {"cpu": "1", "memory": "512Mi"}


def test_overhead_then_defaults_then_limits_as_requests() -> None:
    """Kueue ``AdjustResources``: the RuntimeClass overhead for a pod naming it, the
    LimitRange defaults for what a container leaves out, then limits as missing requests."""
    summary = summarize([[{"type": "Container", "default": {"cpu": "2", "memory": "1Gi"},
                           "defaultRequest": {"cpu": "500m"}}]])
    spec = {"runtimeClassName": "kata",
            "containers": [container(), container(limits={"memory": "2Gi"}),
                           container(requests={"cpu": "1"})]}
    adjusted = adjust_pod_spec(spec, summary=summary, overheads={"kata": {"cpu": "250m"}})

    assert adjusted["overhead"] == {"cpu": "250m"}
    assert [c["resources"] for c in adjusted["containers"]] == [
        {"limits": {"cpu": "2", "memory": "1Gi"},
         "requests": {"cpu": "500m", "memory": "1Gi"}},
        {"limits": {"cpu": "2", "memory": "2Gi"},
         "requests": {"cpu": "500m", "memory": "2Gi"}},
        {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
    ]
    assert {k: str(v) for k, v in pod_requests(adjusted).items()} == {
        "cpu": "9/4", "memory": str(4 * 2**30)}
    # The stored spec is not changed.
    assert spec["containers"][0]["resources"] == {}


def test_a_pod_with_its_own_overhead_or_an_unknown_class_gets_none() -> None:
    """Kueue ``handlePodOverhead`` skips a pod that has an overhead; a RuntimeClass that
    does not exist adds nothing (Kubernetes' admission refuses such a pod later)."""
    own = {"runtimeClassName": "kata", "overhead": {"cpu": "1"}, "containers": [container()]}
    assert adjust_pod_spec(own, summary={}, overheads={"kata": {"cpu": "250m"}})[
        "overhead"] == {"cpu": "1"}
    unknown = {"runtimeClassName": "gvisor", "containers": [container()]}
    assert "overhead" not in adjust_pod_spec(unknown, summary={}, overheads={})


def test_pod_sets_without_a_template_are_left_alone() -> None:
    pod_sets = [{"name": "main", "count": 2, "requests": {"cpu": "1"}}]
    assert adjust_pod_sets(pod_sets, summary={}, overheads={}) == pod_sets


def test_max_and_min_violations_in_kueues_words() -> None:
    """Kueue ``ValidateLimitRange``: the message the scheduler writes in QuotaReserved."""
    summary = summarize([[{"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "1Gi"}}]])
    pod_sets = [{"name": "main", "template": {"spec": {"containers": [
        container(requests={"cpu": "2", "memory": "512Mi"})]}}}]
    assert admissibility_error(pod_sets, summary) == (
        "resources didn't satisfy LimitRange constraints: [spec.podSets[0].template.spec."
        'containers[0]: Invalid value: ["cpu"]: requests must not be above the limitRange max, '
        'spec.podSets[0].template.spec.containers[0]: Invalid value: ["memory"]: requests '
        "must not be below the limitRange min]")
    within = [{"name": "main", "template": {"spec": {"containers": [
        container(requests={"cpu": "1", "memory": "1Gi"})]}}}]
    assert admissibility_error(within, summary) is None


def test_the_pod_type_bounds_the_whole_pod_with_its_overhead() -> None:
    summary = summarize([[{"type": "Pod", "max": {"cpu": "2"}}]])
    spec = {"overhead": {"cpu": "500m"},
            "containers": [container(requests={"cpu": "1"}), container(requests={"cpu": "1"})]}
    assert admissibility_error([{"template": {"spec": spec}}], summary) == (
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec: "
        'Invalid value: ["cpu"]: requests must not be above the limitRange max')


def test_requests_above_limits_come_first() -> None:
    """Kueue ``ValidateResources`` runs before the LimitRange check."""
    pod_sets = [{"template": {"spec": {"containers": [
        container(requests={"cpu": "3"}, limits={"cpu": "2"})]}}}]
    assert admissibility_error(pod_sets, {}) == (
        "resources validation failed: spec.podSets[0].template.spec.containers[0]: Invalid "
        'value: ["cpu"]: requests must not exceed its limits')
