"""The quota kinds over REST: Kueue's shape, computed queue status, filters, pagination,
domains, writes through the codec, in-use refusals, apply/export and the OpenAPI schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling.manifests import yamlio
from scheduling.manifests.apply import apply_manifests, export_manifests
from scheduling.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload

V2 = "kueue.x-k8s.io/v1beta2"


def doc(kind: str, name: str, spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if "namespace" in extra:
        metadata["namespace"] = extra.pop("namespace")
    document: dict[str, Any] = {"apiVersion": V2, "kind": kind, "metadata": metadata}
    if spec is not None:
        document["spec"] = spec
    return {**document, **extra}


def cpu_memory(flavor: str, cpu: Any, memory: str, **limits: Any) -> dict[str, Any]:
    return {"coveredResources": ["cpu", "memory"], "flavors": [{"name": flavor, "resources": [
        {"name": "cpu", "nominalQuota": cpu, **limits}, {"name": "memory", "nominalQuota": memory}]}]}


@pytest.fixture
def quotas(manager: Cluster) -> Cluster:
    apply_manifests([
        doc("ResourceFlavor", "default"),
        doc("ResourceFlavor", "unused"),
        doc("Cohort", "team"),
        doc("Cohort", "lonely"),
        doc("ClusterQueue", "team-a", {"cohortName": "team", "namespaceSelector": {},
                                       "resourceGroups": [cpu_memory("default", 9, "36Gi")]}),
        doc("ClusterQueue", "spare", {"namespaceSelector": {}}),
        doc("LocalQueue", "lq", {"clusterQueue": "team-a"}, namespace="team-a"),
        doc("LocalQueue", "spare-lq", {"clusterQueue": "team-a"}, namespace="team-b"),
        doc("WorkloadPriorityClass", "high", value=1000),
        doc("WorkloadPriorityClass", "low", value=10),
    ], cluster=manager)
    return manager


def add_workload(name: str, *, phase: str, local_queue: LocalQueue | None = None,
                 cluster_queue: ClusterQueue | None = None, active: bool = True,
                 usage: dict[str, str] | None = None) -> Workload:
    admission = None
    if cluster_queue is not None:
        admission = {"clusterQueue": cluster_queue.name, "podSetAssignments": [{
            "name": "main", "flavors": dict.fromkeys(usage or {}, "default"),
            "resourceUsage": usage or {}, "count": 1}]}
    lq = local_queue
    return Workload.objects.create(
        cluster=Cluster.objects.get(role="manager"), namespace="team-a", name=name,
        queue_name=lq.name if lq else "", pod_sets=[{"name": "main", "count": 1, "template": {}}],
        local_queue=lq, cluster_queue=cluster_queue, phase=phase, active=active,
        admission=admission,
    )


@pytest.fixture
def busy(quotas: Cluster) -> Cluster:
    """team-a: one admitted and one quota-reserved workload (11 cpu of 9 nominal), one
    pending, one deactivated pending and one finished."""
    lq = LocalQueue.objects.get(name="lq")
    cq = ClusterQueue.objects.get(name="team-a")
    add_workload("admitted", phase="Admitted", local_queue=lq, cluster_queue=cq,
                 usage={"cpu": "6", "memory": "10Gi"})
    add_workload("reserved", phase="QuotaReserved", local_queue=lq, cluster_queue=cq,
                 usage={"cpu": "5000m", "memory": "1Gi"})
    add_workload("pending", phase="Pending", local_queue=lq)
    add_workload("inactive", phase="Pending", local_queue=lq, active=False)
    add_workload("finished", phase="Finished", local_queue=lq, cluster_queue=cq,
                 usage={"cpu": "1", "memory": "1Gi"})
    return quotas


# --- reading --------------------------------------------------------------------------------


def without_server_fields(document: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in document["metadata"].items()
                if k not in ("uid", "creationTimestamp")}
    return {**document, "metadata": metadata}


def test_cluster_queue_in_kueue_shape_with_computed_status(
    busy: Cluster, viewer_client: APIClient
) -> None:
    response = viewer_client.get("/api/v1/clusterqueues/team-a/")

    assert response.status_code == 200
    assert without_server_fields(response.json()) == {
        "apiVersion": V2,
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a", "resourceVersion": "1", "cluster": "manager"},
        "spec": {
            "cohortName": "team",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [cpu_memory("default", "9", "36Gi")],
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch",
                                  "whenCanPreempt": "TryNextFlavor"},
            "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never",
                           "borrowWithinCohort": {"policy": "Never"}},
            "stopPolicy": "None",
        },
        "status": {
            "conditions": [],
            "pendingWorkloads": 1,
            "reservingWorkloads": 2,
            "admittedWorkloads": 1,
            "flavorsReservation": [{"name": "default", "resources": [
                {"name": "cpu", "total": "11", "borrowed": "2"},
                {"name": "memory", "total": "11Gi", "borrowed": "0"}]}],
            "flavorsUsage": [{"name": "default", "resources": [
                {"name": "cpu", "total": "6", "borrowed": "0"},
                {"name": "memory", "total": "10Gi", "borrowed": "0"}]}],
        },
    }


def test_borrowed_is_zero_without_a_cohort(quotas: Cluster, viewer_client: APIClient) -> None:
    apply_manifests([doc("ClusterQueue", "alone", {"resourceGroups": [
        cpu_memory("default", 1, "1Gi")]})])
    add_workload("big", phase="Admitted", cluster_queue=ClusterQueue.objects.get(name="alone"),
                 usage={"cpu": "3", "memory": "1Gi"})

    status = viewer_client.get("/api/v1/clusterqueues/alone/").json()["status"]

    assert status["flavorsUsage"] == [{"name": "default", "resources": [
        {"name": "cpu", "total": "3", "borrowed": "0"},
        {"name": "memory", "total": "1Gi", "borrowed": "0"}]}]


def test_local_queue_status(busy: Cluster, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/namespaces/team-a/localqueues/lq/")

    assert response.status_code == 200
    body = response.json()
    assert (body["apiVersion"], body["kind"], body["metadata"]["namespace"], body["spec"]) == (
        V2, "LocalQueue", "team-a", {"clusterQueue": "team-a", "stopPolicy": "None"})
    assert body["status"] == {
        "conditions": [],
        "pendingWorkloads": 1,
        "reservingWorkloads": 2,
        "admittedWorkloads": 1,
        "flavorsReservation": [{"name": "default", "resources": [
            {"name": "cpu", "total": "11"}, {"name": "memory", "total": "11Gi"}]}],
        "flavorsUsage": [{"name": "default", "resources": [
            {"name": "cpu", "total": "6"}, {"name": "memory", "total": "10Gi"}]}],
    }


def test_priority_class_has_value_at_top_level(quotas: Cluster, viewer_client: APIClient) -> None:
    body = viewer_client.get("/api/v1/workloadpriorityclasses/high/").json()

    assert (body["kind"], body["value"], "spec" in body, "status" in body) == (
        "WorkloadPriorityClass", 1000, False, False)


def queries_for(client: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_queue_lists_use_a_fixed_number_of_queries(
    busy: Cluster, viewer_client: APIClient
) -> None:
    viewer_client.get("/api/v1/resourceflavors/")  # the role is looked up once per user
    one_cq = queries_for(viewer_client, "/api/v1/clusterqueues/")
    one_lq = queries_for(viewer_client, "/api/v1/localqueues/")
    for i in range(5):
        apply_manifests([
            doc("ClusterQueue", f"cq-{i}", {"cohortName": "team", "resourceGroups": [
                cpu_memory("default", 1, "1Gi")]}),
            doc("LocalQueue", f"lq-{i}", {"clusterQueue": f"cq-{i}"}, namespace="team-c"),
        ])
        queue = ClusterQueue.objects.get(name=f"cq-{i}")
        add_workload(f"w-{i}", phase="Admitted", cluster_queue=queue,
                     local_queue=LocalQueue.objects.get(name=f"lq-{i}"),
                     usage={"cpu": "1", "memory": "1Gi"})

    assert queries_for(viewer_client, "/api/v1/clusterqueues/") == one_cq
    assert queries_for(viewer_client, "/api/v1/localqueues/") == one_lq


def names(response: Any) -> list[str]:
    return [item["metadata"]["name"] for item in response.json()["results"]]


@pytest.mark.parametrize(
    ("url", "want"),
    [
        pytest.param("/api/v1/clusterqueues/?cohort=team", ["team-a"], id="clusterqueues by cohort"),
        pytest.param("/api/v1/localqueues/?clusterQueue=team-a", ["lq", "spare-lq"],
                     id="localqueues by clusterQueue"),
        pytest.param("/api/v1/localqueues/?namespace=team-b", ["spare-lq"],
                     id="localqueues by namespace"),
        pytest.param("/api/v1/namespaces/team-b/localqueues/", ["spare-lq"],
                     id="localqueues of a namespace"),
        pytest.param("/api/v1/cohorts/?parentName=team", ["child"], id="cohorts by parent"),
        pytest.param("/api/v1/resourceflavors/?limit=1&offset=1", ["unused"], id="pagination"),
    ],
)
def test_filters_and_pagination(quotas: Cluster, viewer_client: APIClient, url: str,
                                want: list[str]) -> None:
    apply_manifests([doc("Cohort", "child", {"parentName": "team"})])

    assert names(viewer_client.get(url)) == want


def test_list_is_paginated_with_a_count(quotas: Cluster, viewer_client: APIClient) -> None:
    body = viewer_client.get("/api/v1/workloadpriorityclasses/?limit=1").json()

    assert (body["count"], len(body["results"]), body["previous"]) == (2, 1, None)
    assert body["next"] == "http://testserver/api/v1/workloadpriorityclasses/?limit=1&offset=1"


def test_another_domain_by_cluster_parameter(quotas: Cluster, viewer_client: APIClient) -> None:
    Cluster.objects.create(name="worker-1")
    apply_manifests([doc("ResourceFlavor", "gpu")], cluster="worker-1")

    assert names(viewer_client.get("/api/v1/resourceflavors/?cluster=worker-1")) == ["gpu"]
    assert viewer_client.get("/api/v1/resourceflavors/gpu/").status_code == 404
    assert viewer_client.get("/api/v1/resourceflavors/gpu/?cluster=worker-1").json()[
        "metadata"]["cluster"] == "worker-1"


def test_unknown_cluster_is_not_found(quotas: Cluster, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/clusterqueues/?cluster=nowhere")

    assert (response.status_code, response.json()) == (
        404, {"detail": 'clusters "nowhere" not found'})


def test_unknown_object_is_not_found_in_kubernetes_words(
    quotas: Cluster, viewer_client: APIClient
) -> None:
    response = viewer_client.get("/api/v1/namespaces/team-a/localqueues/nope/")

    assert (response.status_code, response.json()) == (
        404, {"detail": 'localqueues.kueue.x-k8s.io "team-a/nope" not found'})


def test_routes_answer_without_trailing_slash(quotas: Cluster, viewer_client: APIClient) -> None:
    assert viewer_client.get("/api/v1/clusterqueues/team-a").status_code == 200
    assert viewer_client.get("/api/v1/clusterqueues").status_code == 200


# --- writing ----------------------------------------------------------------------------------


def test_create_cluster_queue_through_the_codec(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    body = {"metadata": {"name": "team-b"}, "spec": {
        "cohortName": "new-cohort",
        "resourceGroups": [cpu_memory("default", "4", "8Gi", lendingLimit="2")],
    }}

    response = admin_client_api.post("/api/v1/clusterqueues/", body, format="json")

    assert response.status_code == 201
    created = response.json()
    assert created["spec"]["cohortName"] == "new-cohort"
    assert created["spec"]["resourceGroups"] == [cpu_memory("default", "4", "8Gi",
                                                            lendingLimit="2")]
    assert "namespaceSelector" not in created["spec"]
    assert created["status"]["pendingWorkloads"] == 0
    assert Cohort.objects.filter(name="new-cohort").exists()


def test_create_accepts_yaml(quotas: Cluster, admin_client_api: APIClient) -> None:
    body = "metadata:\n  name: gpu\nspec:\n  nodeLabels:\n    accelerator: a100\n"

    response = admin_client_api.post("/api/v1/resourceflavors/", body,
                                     content_type="application/yaml")

    assert response.status_code == 201
    assert response.json()["spec"] == {"nodeLabels": {"accelerator": "a100"}}


def test_create_errors_name_the_field(quotas: Cluster, admin_client_api: APIClient) -> None:
    body = {"metadata": {"name": "team-b"}, "spec": {
        "resourceGroups": [cpu_memory("default", "4", "8Gi", borrowingLimit="1")],
        "preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}},
    }}

    response = admin_client_api.post("/api/v1/clusterqueues/", body, format="json")

    assert (response.status_code, response.json()) == (400, {
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit":
            ["must be nil when cohort is empty"],
        "spec.preemption.borrowWithinCohort.policy":
            ["reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"],
    })
    assert not ClusterQueue.objects.filter(name="team-b").exists()


def test_create_refuses_a_missing_flavor(quotas: Cluster, admin_client_api: APIClient) -> None:
    body = {"metadata": {"name": "gpu-cq"}, "spec": {"resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu",
                                                    "nominalQuota": 8}]}]}]}}

    response = admin_client_api.post("/api/v1/clusterqueues/", body, format="json")

    assert (response.status_code, response.json()) == (400, {
        "spec.resourceGroups[0].flavors[0].name":
            ['ResourceFlavor "a100" does not exist in cluster "manager"']})


def test_create_existing_name_conflicts(quotas: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/resourceflavors/",
                                     {"metadata": {"name": "default"}}, format="json")

    assert (response.status_code, response.json()) == (
        409, {"detail": 'resourceflavors.kueue.x-k8s.io "default" already exists'})


def test_kind_must_match_the_endpoint(quotas: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/cohorts/", {
        "apiVersion": V2, "kind": "ClusterQueue", "metadata": {"name": "x"}}, format="json")

    assert (response.status_code, response.json()) == (
        400, {"kind": ['must be "Cohort" at this endpoint']})


def test_local_queue_namespace_comes_from_the_url(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    created = admin_client_api.post("/api/v1/namespaces/team-c/localqueues/", {
        "metadata": {"name": "new"}, "spec": {"clusterQueue": "team-a"}}, format="json")
    mismatch = admin_client_api.post("/api/v1/namespaces/team-c/localqueues/", {
        "metadata": {"name": "other", "namespace": "team-d"}, "spec": {"clusterQueue": "team-a"}},
        format="json")

    assert (created.status_code, created.json()["metadata"]["namespace"]) == (201, "team-c")
    assert (mismatch.status_code, mismatch.json()) == (400, {"metadata.namespace": [
        'the namespace of the object ("team-d") does not match the namespace in the URL '
        '("team-c")']})


def test_put_replaces_the_spec_and_ignores_status(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    current = admin_client_api.get("/api/v1/clusterqueues/team-a/").json()
    current["spec"]["stopPolicy"] = "HoldAndDrain"
    current["spec"].pop("cohortName")
    current["status"]["pendingWorkloads"] = 99

    response = admin_client_api.put("/api/v1/clusterqueues/team-a/", current, format="json")

    assert response.status_code == 200
    body = response.json()
    assert (body["spec"]["stopPolicy"], "cohortName" in body["spec"],
            body["status"]["pendingWorkloads"], body["metadata"]["resourceVersion"]) == (
        "HoldAndDrain", False, 0, "2")
    queue = ClusterQueue.objects.get(name="team-a")
    assert (queue.stop_policy, queue.cohort_id) == ("HoldAndDrain", None)


def test_put_with_a_stale_resource_version_conflicts(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    current = admin_client_api.get("/api/v1/cohorts/lonely/").json()
    admin_client_api.patch("/api/v1/cohorts/lonely/", {"spec": {"fairSharing": {"weight": "2"}}},
                           format="json")

    response = admin_client_api.put("/api/v1/cohorts/lonely/", current, format="json")

    assert (response.status_code, response.json()) == (409, {"detail": (
        "the object has been modified; please apply your changes to the latest version and try "
        "again")})


def test_put_name_must_match_the_url(quotas: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.put("/api/v1/resourceflavors/unused/",
                                    {"metadata": {"name": "other"}}, format="json")

    assert (response.status_code, response.json()) == (400, {"metadata.name": [
        'the name of the object ("other") does not match the name in the URL ("unused")']})


def test_patch_is_a_json_merge_patch(quotas: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.patch("/api/v1/clusterqueues/team-a/", {"spec": {
        "cohortName": None, "queueingStrategy": "StrictFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority"},
    }}, format="json")

    assert response.status_code == 200
    spec = response.json()["spec"]
    assert ("cohortName" in spec, spec["queueingStrategy"], spec["preemption"],
            spec["resourceGroups"]) == (
        False, "StrictFIFO",
        {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never",
         "borrowWithinCohort": {"policy": "Never"}},
        [cpu_memory("default", "9", "36Gi")])


def test_patch_refuses_changing_a_local_queues_cluster_queue(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.patch("/api/v1/namespaces/team-a/localqueues/lq/",
                                      {"spec": {"clusterQueue": "spare"}}, format="json")

    assert (response.status_code, response.json()) == (400, {"spec.clusterQueue":
                                                             ["field is immutable"]})


def test_patch_accepts_merge_patch_media_type(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.patch("/api/v1/workloadpriorityclasses/low/",
                                      json.dumps({"value": 20}),
                                      content_type="application/merge-patch+json")

    assert (response.status_code, response.json()["value"]) == (200, 20)


def test_warnings_travel_in_warning_headers(quotas: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/clusterqueues/", {
        "metadata": {"name": "afs"}, "spec": {"admissionScope": {
            "admissionMode": "UsageBasedAdmissionFairSharing"}}}, format="json")

    assert response.status_code == 201
    assert response["Warning"] == (
        '299 - "spec.admissionScope is not supported by kueueweb (Admission Fair Sharing) and '
        'was ignored"')


# --- deleting: Kueue's resource-in-use finalizer ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "want_detail"),
    [
        pytest.param("/api/v1/resourceflavors/default/",
                     'ResourceFlavor "default" is in use by ClusterQueue "team-a": remove it '
                     "from their resourceGroups first", id="flavor used by a queue"),
        pytest.param("/api/v1/cohorts/team/",
                     'Cohort "team" has members: ClusterQueue "team-a"; move or delete them '
                     "first", id="cohort with members"),
        pytest.param("/api/v1/clusterqueues/team-a/",
                     'ClusterQueue "team-a" is in use: LocalQueue team-a/lq, team-b/spare-lq '
                     "point to it; 2 workload(s) hold quota in it; 1 finished workload(s) were "
                     "admitted by it (delete them first)", id="queue with local queues"),
    ],
)
def test_deleting_an_object_in_use_is_refused(
    busy: Cluster, admin_client_api: APIClient, url: str, want_detail: str
) -> None:
    response = admin_client_api.delete(url)

    assert (response.status_code, response.json()) == (409, {"detail": want_detail})
    assert admin_client_api.get(url).status_code == 200


def test_deleting_unused_objects(quotas: Cluster, admin_client_api: APIClient) -> None:
    urls = ["/api/v1/namespaces/team-b/localqueues/spare-lq/", "/api/v1/clusterqueues/spare/",
            "/api/v1/resourceflavors/unused/", "/api/v1/cohorts/lonely/",
            "/api/v1/workloadpriorityclasses/low/"]

    statuses = [admin_client_api.delete(url).status_code for url in urls]

    assert statuses == [204] * 5
    assert [admin_client_api.get(url).status_code for url in urls] == [404] * 5


def test_flavor_used_by_a_cohort_only(quotas: Cluster, admin_client_api: APIClient) -> None:
    apply_manifests([doc("Cohort", "lonely", {"resourceGroups": [cpu_memory("unused", 1, "1Gi")]})])

    response = admin_client_api.delete("/api/v1/resourceflavors/unused/")

    assert (response.status_code, response.json()["detail"]) == (
        409, 'ResourceFlavor "unused" is in use by Cohort "lonely": remove it from their '
             "resourceGroups first")


# --- apply and export endpoints ---------------------------------------------------------------

SETUP_YAML = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: team-x
  name: user-queue
spec:
  clusterQueue: cluster-queue
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: cluster-queue
spec:
  namespaceSelector: {}
  cohortName: shared
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: default-flavor
      resources:
      - name: cpu
        nominalQuota: 9
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: default-flavor
"""


def test_apply_endpoint_takes_yaml(manager: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/apply", SETUP_YAML, content_type="application/yaml")

    assert (response.status_code, response.json()) == (200, {
        "cluster": "manager",
        "created": [{"kind": "ResourceFlavor", "name": "default-flavor"},
                    {"kind": "Cohort", "name": "shared", "implicit": True},
                    {"kind": "ClusterQueue", "name": "cluster-queue"},
                    {"kind": "LocalQueue", "name": "user-queue", "namespace": "team-x"}],
        "updated": [], "unchanged": [], "warnings": [],
    })


def test_apply_endpoint_takes_json_and_a_cluster(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    Cluster.objects.create(name="worker-1")
    documents = yamlio.load_yaml_documents(SETUP_YAML)

    first = admin_client_api.post("/api/v1/apply?cluster=worker-1", documents, format="json")
    again = admin_client_api.post("/api/v1/apply?cluster=worker-1",
                                  {"apiVersion": "v1", "kind": "List", "items": documents},
                                  format="json")

    assert (first.status_code, first.json()["cluster"], len(first.json()["created"])) == (
        200, "worker-1", 4)
    assert (again.status_code, len(again.json()["unchanged"])) == (200, 3)
    assert list(ClusterQueue.objects.values_list("cluster__name", flat=True)) == ["worker-1"]


def test_apply_endpoint_rejects_the_whole_apply(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    bad = SETUP_YAML.replace("nominalQuota: 9", "nominalQuota: nine")

    response = admin_client_api.post("/api/v1/apply", bad, content_type="text/yaml")

    assert (response.status_code, response.json()) == (400, {
        "detail": 'documents[1] (ClusterQueue "cluster-queue"): '
                  "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: 'nine' is not a "
                  "valid quantity: expected a number with an optional suffix such as 500m, 2, "
                  "1.5, 4Gi or 1e3",
        "documents": [{"index": 1, "kind": "ClusterQueue", "name": "cluster-queue",
                       "namespace": None, "errors": {
                           "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota": [
                               "'nine' is not a valid quantity: expected a number with an "
                               "optional suffix such as 500m, 2, 1.5, 4Gi or 1e3"]}}],
    })
    assert not ResourceFlavor.objects.exists()


def test_apply_endpoint_refuses_aliases(manager: Cluster, admin_client_api: APIClient) -> None:
    body = "a: &x [1, 2]\nb: *x\n"

    response = admin_client_api.post("/api/v1/apply", body, content_type="application/yaml")

    message = ("YAML anchors and aliases are not accepted (line 1, column 4): write the value "
               "out in full")
    assert (response.status_code, response.json()) == (400, {"detail": message,
                                                             "body": [message]})


@override_settings(KUEUEWEB={"MAX_MANIFEST_BYTES": 64})
def test_apply_endpoint_refuses_oversized_bodies(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.post("/api/v1/apply", SETUP_YAML, content_type="application/yaml")

    assert (response.status_code, response.json()) == (413, {"detail": (
        f"manifests are {len(SETUP_YAML)} bytes; at most 64 bytes are accepted "
        "(KUEUEWEB_MAX_MANIFEST_BYTES)")})


def test_apply_endpoint_unknown_cluster(manager: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/apply?cluster=nowhere", SETUP_YAML,
                                     content_type="application/yaml")

    assert response.status_code == 404


def test_export_endpoint_gives_yaml_that_applies_back(
    quotas: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.get("/api/v1/export")

    assert (response.status_code, response["Content-Type"]) == (200, "application/yaml; "
                                                                "charset=utf-8")
    documents = yamlio.load_yaml_documents(response.content)
    assert documents == export_manifests(quotas)
    applied = admin_client_api.post("/api/v1/apply", response.content,
                                    content_type="application/yaml")
    assert (applied.json()["created"], applied.json()["updated"]) == ([], [])


def test_export_endpoint_as_json_list(quotas: Cluster, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/export?format=json")

    body = response.json()
    assert (response.status_code, body["apiVersion"], body["kind"]) == (200, "v1", "List")
    assert [item["kind"] for item in body["items"]][:2] == ["ResourceFlavor", "ResourceFlavor"]


# --- OpenAPI ---------------------------------------------------------------------------------


def test_openapi_schema_describes_the_endpoints(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    for path in ("/api/v1/resourceflavors/", "/api/v1/resourceflavors/{name}/",
                 "/api/v1/cohorts/", "/api/v1/cohorts/{name}/", "/api/v1/clusterqueues/",
                 "/api/v1/clusterqueues/{name}/", "/api/v1/workloadpriorityclasses/",
                 "/api/v1/workloadpriorityclasses/{name}/", "/api/v1/localqueues/",
                 "/api/v1/namespaces/{namespace}/localqueues/",
                 "/api/v1/namespaces/{namespace}/localqueues/{name}/",
                 "/api/v1/admissionchecks/", "/api/v1/admissionchecks/{name}/",
                 "/api/v1/multikueueconfigs/", "/api/v1/multikueueconfigs/{name}/",
                 "/api/v1/clusters/", "/api/v1/clusters/{name}/", "/api/v1/apply",
                 "/api/v1/export"):
        assert path in schema["paths"], path
    assert set(schema["components"]["schemas"]["ClusterQueueSpec"]["properties"]) == {
        "cohortName", "namespaceSelector", "queueingStrategy", "resourceGroups",
        "flavorFungibility", "preemption", "admissionChecksStrategy", "stopPolicy", "fairSharing"}
    connection = schema["components"]["schemas"]["ConnectionRequest"]["properties"]
    assert ("kubeconfig" in connection, "hasKubeconfig" in connection) == (True, False)
    params = {p["name"] for p in schema["paths"]["/api/v1/clusterqueues/"]["get"]["parameters"]}
    assert {"cluster", "cohort", "limit", "offset"} <= params


def test_schema_spec_properties_match_the_codec() -> None:
    # The declared serializer fields document exactly what the codec reads.
    from scheduling.api.serializers import ClusterQueueSpecSerializer
    from scheduling.manifests.codec import ClusterQueueKind

    assert set(ClusterQueueSpecSerializer().fields) == {*ClusterQueueKind.FIELDS, "cohortName"}


@pytest.mark.parametrize("body", ["", "# only a comment\n", "---\n---\n"])
def test_apply_endpoint_refuses_an_empty_body(manager: Cluster, admin_client_api: APIClient,
                                              body: str) -> None:
    response = admin_client_api.post("/api/v1/apply", body, content_type="application/yaml")

    assert (response.status_code, response.json()) == (400, {
        "detail": "no objects passed to apply", "body": ["no objects passed to apply"]})
