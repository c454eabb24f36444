"""AdmissionChecks and MultiKueueConfigs over REST, in Kueue's shape, per cluster."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig
from scheduling.manifests.apply import apply_manifests

V2 = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def multikueue(manager: Cluster) -> Cluster:
    apply_manifests([
        {"apiVersion": V2, "kind": "AdmissionCheck", "metadata": {"name": "mk-check"},
         "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {
             "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mk"}}},
        {"apiVersion": V2, "kind": "AdmissionCheck", "metadata": {"name": "manual"},
         "spec": {"controllerName": "kueueweb.io/manual"}},
        {"apiVersion": V2, "kind": "MultiKueueConfig", "metadata": {"name": "mk"},
         "spec": {"clusters": ["worker-1", "worker-2"]}},
        {"apiVersion": V2, "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "mk-check"}]}}},
    ])
    return manager


def strip(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "metadata": {"name": document["metadata"]["name"]}}


def test_admission_check_in_kueue_shape(multikueue: Cluster, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/admissionchecks/mk-check/")

    assert (response.status_code, strip(response.json())) == (200, {
        "apiVersion": V2, "kind": "AdmissionCheck", "metadata": {"name": "mk-check"},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {
            "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mk"}},
        "status": {"conditions": []},
    })


def test_admission_checks_filtered_by_controller(
    multikueue: Cluster, viewer_client: APIClient
) -> None:
    response = viewer_client.get("/api/v1/admissionchecks/?controllerName=kueueweb.io/manual")

    assert [c["metadata"]["name"] for c in response.json()["results"]] == ["manual"]


def test_admission_check_in_use_cannot_be_deleted(
    multikueue: Cluster, admin_client_api: APIClient
) -> None:
    refused = admin_client_api.delete("/api/v1/admissionchecks/mk-check/")
    deleted = admin_client_api.delete("/api/v1/admissionchecks/manual/")

    assert (refused.status_code, refused.json()) == (409, {"detail": (
        'AdmissionCheck "mk-check" is in use by ClusterQueue "cq": remove it from their '
        "admissionChecksStrategy first")})
    assert deleted.status_code == 204
    assert list(AdmissionCheck.objects.values_list("name", flat=True)) == ["mk-check"]


def test_admission_check_controller_is_immutable(
    multikueue: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.patch("/api/v1/admissionchecks/manual/",
                                      {"spec": {"controllerName": "kueue.x-k8s.io/multikueue"}},
                                      format="json")

    assert (response.status_code, response.json()) == (400, {"spec.controllerName":
                                                             ["field is immutable"]})


def test_multikueue_config_with_dispatcher_annotation(
    multikueue: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.post("/api/v1/multikueueconfigs/", {
        "metadata": {"name": "incremental",
                     "annotations": {"kueueweb.io/dispatcher": "Incremental"}},
        "spec": {"clusters": ["worker-2", "worker-1"]}}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert (body["metadata"]["annotations"], body["spec"], "status" in body) == (
        {"kueueweb.io/dispatcher": "Incremental"}, {"clusters": ["worker-2", "worker-1"]}, False)
    config = MultiKueueConfig.objects.get(name="incremental")
    assert (config.clusters, config.dispatcher) == (["worker-2", "worker-1"], "Incremental")


def test_multikueue_config_errors(multikueue: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/multikueueconfigs/", {
        "metadata": {"name": "bad", "annotations": {"kueueweb.io/dispatcher": "Random"}},
        "spec": {"clusters": ["w", "w"]}}, format="json")

    assert (response.status_code, response.json()) == (400, {
        "spec.clusters[1]": ['Duplicate value: "w"'],
        "metadata.annotations[kueueweb.io/dispatcher]": [
            'Unsupported value: "Random": supported values: "AllAtOnce", "Incremental", '
            '"External"'],
    })


def test_other_cluster_by_parameter(multikueue: Cluster, admin_client_api: APIClient) -> None:
    Cluster.objects.create(name="worker-1")

    created = admin_client_api.post("/api/v1/admissionchecks/?cluster=worker-1", {
        "metadata": {"name": "manual"}, "spec": {"controllerName": "kueueweb.io/manual"}},
        format="json")

    assert (created.status_code, created.json()["metadata"]["cluster"]) == (201, "worker-1")
    assert sorted(AdmissionCheck.objects.values_list("cluster__name", "name")) == [
        ("manager", "manual"), ("manager", "mk-check"), ("worker-1", "manual")]


READS = ["/api/v1/admissionchecks/", "/api/v1/admissionchecks/manual/",
         "/api/v1/multikueueconfigs/", "/api/v1/multikueueconfigs/mk/"]
WRITES = [
    ("post", "/api/v1/admissionchecks/",
     {"metadata": {"name": "new"}, "spec": {"controllerName": "kueueweb.io/manual"}}, 201),
    ("put", "/api/v1/admissionchecks/manual/",
     {"metadata": {"name": "manual"}, "spec": {"controllerName": "kueueweb.io/manual",
                                               "parameters": {"kind": "X", "name": "x"}}}, 200),
    ("patch", "/api/v1/admissionchecks/manual/",
     {"spec": {"parameters": {"kind": "X", "name": "x"}}}, 200),
    ("delete", "/api/v1/admissionchecks/manual/", None, 204),
    ("post", "/api/v1/multikueueconfigs/", {"metadata": {"name": "new"},
                                            "spec": {"clusters": ["w"]}}, 201),
    ("put", "/api/v1/multikueueconfigs/mk/", {"metadata": {"name": "mk"},
                                              "spec": {"clusters": ["w"]}}, 200),
    ("patch", "/api/v1/multikueueconfigs/mk/", {"spec": {"clusters": ["w"]}}, 200),
    ("delete", "/api/v1/multikueueconfigs/mk/", None, 204),
]


def snapshot() -> list[Any]:
    return [*AdmissionCheck.objects.values_list("name", "parameters", "resource_version"),
            *MultiKueueConfig.objects.values_list("name", "clusters", "resource_version")]


@pytest.mark.parametrize(
    ("role", "want_read", "want_write"),
    [("anon_client", 401, 401), ("viewer_client", 200, 403), ("operator_client", 200, 403)],
)
def test_only_admins_write(multikueue: Cluster, role: str, want_read: int, want_write: int,
                           request: pytest.FixtureRequest) -> None:
    client: APIClient = request.getfixturevalue(role)
    before = snapshot()

    reads = [client.get(url).status_code for url in READS]
    writes = [getattr(client, method)(url, body, format="json").status_code
              for method, url, body, _ in WRITES]

    assert (reads, writes) == ([want_read] * len(READS), [want_write] * len(WRITES))
    assert snapshot() == before


@pytest.mark.parametrize(("method", "url", "body", "want"), WRITES)
def test_admins_write(multikueue: Cluster, admin_client_api: APIClient, method: str, url: str,
                      body: Any, want: int) -> None:
    before = snapshot()

    response = getattr(admin_client_api, method)(url, body, format="json")

    assert response.status_code == want
    assert snapshot() != before
