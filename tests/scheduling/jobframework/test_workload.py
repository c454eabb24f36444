"""The Workload's name and pod requests, as Kueue's job framework computes them for any kind
(``scheduling.jobframework``)."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from scheduling import jobframework


def sha1_hash(*parts: str) -> str:
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:5]


# --- Names -----------------------------------------------------------------------------------

LONG_NAME = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-"
    "department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-"
    "engineering-team-lead-senior-architect-validation-checked-approved-by-legal-and-ops-dept"
)


@dataclass(frozen=True)
class NameCase:
    name: str
    owner: str
    uid: str
    want: str
    extra: str = ""
    max_length: int = 253


# The cases of Kueue's pkg/controller/jobframework/workload_names_test.go.
NAME_CASES = [
    NameCase("short name", "name", "uid", "job-name-ef3a1"),
    NameCase("short name with generation", "name", "uid", "job-name-2514c", extra="1"),
    NameCase(
        "long name cut to 253",
        LONG_NAME,
        "uid",
        "job-marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-"
        "sub-department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-"
        "revision-by-engineering-team-lead-senior-architect-validation-checked-approved-by-l-"
        "218b8",
    ),
    NameCase("long name cut to 63 (ShortWorkloadNames)", LONG_NAME, "uid",
             "job-marketing-campaign-autumn-2024-region-north-america-d-218b8", max_length=63),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.name)
def test_workload_name_matches_kueue(case: NameCase) -> None:
    got = jobframework.workload_name_for_owner(
        case.owner, case.uid, extra=case.extra, max_length=case.max_length)

    assert got == case.want
    assert len(got) == min(len("job-" + case.owner), case.max_length - 6) + 6


def test_workload_name_hash_covers_kind_group_name_and_uid() -> None:
    assert jobframework.workload_name_for_owner("pi", "1234") == f"job-pi-{sha1_hash('Job', 'batch', 'pi', '1234')}"
    assert jobframework.workload_name_for_owner("pi", "1234") != jobframework.workload_name_for_owner("pi", "1235")


def test_generate_name_appends_five_characters_and_cuts_long_prefixes() -> None:
    letters = itertools.cycle("bcdfg")

    assert jobframework.generate_name("sample-job-", lambda _: next(letters)) == "sample-job-bcdfg"
    assert jobframework.generate_name("a" * 70, lambda _: "z") == "a" * 58 + "zzzzz"


# --- Pod requests ----------------------------------------------------------------------------



def container(name: str, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


@dataclass(frozen=True)
class RequestCase:
    name: str
    pod_spec: dict[str, Any]
    want: dict[str, str]


REQUEST_CASES = [
    RequestCase("containers are summed", {"containers": [
        container("a", {"cpu": "500m", "memory": "1Gi"}), container("b", {"cpu": "1", "memory": "512Mi"}),
    ]}, {"cpu": "1500m", "memory": "1536Mi"}),
    RequestCase("limits stand in for missing requests", {"containers": [
        container("a", {"cpu": "250m"}, {"cpu": "1", "memory": "2Gi"}),
    ]}, {"cpu": "250m", "memory": "2Gi"}),
    RequestCase("an init container larger than the containers sets the request", {
        "initContainers": [container("init", {"cpu": "3", "memory": "100Mi"})],
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
    }, {"cpu": "3", "memory": "1Gi"}),
    RequestCase("sidecars add to the containers and to later init containers", {
        "initContainers": [
            container("early", {"cpu": "2"}),
            container("proxy", {"cpu": "500m"}, restartPolicy="Always"),
            container("late", {"cpu": "2"}),
        ],
        "containers": [container("a", {"cpu": "1"})],
    }, {"cpu": "2500m"}),
    RequestCase("sidecars alone make the sum the largest", {
        "initContainers": [container("proxy", {"cpu": "2"}, restartPolicy="Always")],
        "containers": [container("a", {"cpu": "1"})],
    }, {"cpu": "3"}),
    RequestCase("pod overhead is added", {
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "100m", "memory": "64Mi"},
    }, {"cpu": "1100m", "memory": "1088Mi"}),
    RequestCase("pod-level requests replace cpu and memory", {
        "containers": [container("a", {"cpu": "1", "nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})],
        "resources": {"limits": {"cpu": "4", "memory": "8Gi"}},
    }, {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}),
    RequestCase("containers without resources request nothing",
                {"containers": [{"name": "a", "image": "busybox"}]}, {}),
]


@pytest.mark.parametrize("case", REQUEST_CASES, ids=lambda c: c.name)
def test_pod_set_requests_follow_kubernetes_effective_request(case: RequestCase) -> None:
    pod_set = {"name": "main", "count": 4, "template": {"spec": case.pod_spec}}

    assert jobframework.pod_set_requests(pod_set) == case.want


def test_pod_set_total_requests_multiply_by_count() -> None:
    pod_set = {"name": "main", "count": 3, "template": {"spec": {"containers": [
        container("a", {"cpu": "1", "memory": "200Mi"})]}}}

    assert jobframework.pod_set_total_requests(pod_set) == {"cpu": "3", "memory": "600Mi"}


def test_pod_set_without_template_uses_its_requests_shorthand() -> None:
    assert jobframework.pod_set_requests({"name": "main", "count": 3, "requests": {"cpu": "1"}}) == {"cpu": "1"}

