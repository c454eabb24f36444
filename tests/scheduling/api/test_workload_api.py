"""/api/v1/.../workloads: Kueue's Workload objects, filters, spec changes and roles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload, WorkloadPriorityClass

pytestmark = pytest.mark.django_db


def iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


def job_manifest(name: str = "pi", queue: str = "user-queue", cpu: str = "2") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: queue}},
        "spec": {
            "parallelism": 3,
            "completions": 6,
            "template": {"spec": {
                "containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                "restartPolicy": "Never",
            }},
        },
    }


def workload_body(name: str = "bare", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "labels": {"team": "ml"}},
        "spec": {
            "queueName": "user-queue",
            "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}}],
            **spec,
        },
    }


@pytest.fixture
def cluster_queue(manager: Cluster) -> ClusterQueue:
    return ClusterQueue.objects.create(cluster=manager, name="cq")


@pytest.fixture
def queues(manager: Cluster, cluster_queue: ClusterQueue) -> list[LocalQueue]:
    return [
        LocalQueue.objects.create(cluster=manager, namespace=ns, name="user-queue",
                                  cluster_queue=cluster_queue)
        for ns in ("team-a", "team-b")
    ]


@pytest.fixture
def job(queues: list[LocalQueue]) -> Job:
    return services.submit_job(job_manifest(), namespace="team-a")


def admit(workload: Workload, cluster_queue: ClusterQueue) -> None:
    Workload.objects.filter(pk=workload.pk).update(
        phase=WorkloadPhase.ADMITTED,
        cluster_queue=cluster_queue,
        admission={"clusterQueue": cluster_queue.name, "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "default", "memory": "default"},
             "resourceUsage": {"cpu": "6", "memory": "3Gi"}, "count": 3}]},
        conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                     "message": "Quota reserved in ClusterQueue cq",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    )
    workload.refresh_from_db()


def url(namespace: str | None = None, name: str | None = None) -> str:
    if namespace is None:
        return "/api/v1/workloads/"
    base = f"/api/v1/namespaces/{namespace}/workloads/"
    return f"{base}{name}/" if name else base


# --- Shape ------------------------------------------------------------------------------------


def test_workload_of_a_job_in_kueue_shape(admin_client_api: APIClient, job: Job) -> None:
    workload = job.workloads.get()

    response = admin_client_api.get(url("team-a", workload.name))

    assert response.status_code == 200
    assert response.json() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload.name,
            "namespace": "team-a",
            "uid": str(workload.uid),
            "resourceVersion": "1",
            "creationTimestamp": iso(workload.created_at),
            "labels": {jobframework.JOB_UID_LABEL: str(job.uid)},
            "cluster": "manager",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi",
                                 "uid": str(job.uid), "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "podSets": [{"name": "main", "count": 3,
                         "template": job_manifest()["spec"]["template"]}],
            "queueName": "user-queue",
            "priority": 0,
            "active": True,
        },
        "status": {
            "conditions": [],
            "admission": None,
            "requeueState": None,
            "reclaimablePods": [],
            "admissionChecks": [],
            "accumulatedPastExecutionTimeSeconds": 0,
            "schedulingStats": None,
            "nominatedClusterNames": [],
            "clusterName": None,
            "resourceRequests": [{"name": "main", "resources": {"cpu": "6", "memory": "3Gi"}}],
        },
    }


def test_admitted_workload_shows_its_admission(
    admin_client_api: APIClient, job: Job, cluster_queue: ClusterQueue, manager: Cluster
) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=10)
    workload = services.create_workload(
        {"queueName": "user-queue", "priorityClassRef": {"name": "high"},
         "maximumExecutionTimeSeconds": 60,
         "podSets": [{"template": {"spec": {"containers": [{"name": "c"}]}}}]},
        namespace="team-a", name="bare")
    admit(workload, cluster_queue)

    body = admin_client_api.get(url("team-a", "bare")).json()

    assert "ownerReferences" not in body["metadata"]
    assert body["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert (body["spec"]["priority"], body["spec"]["maximumExecutionTimeSeconds"]) == (10, 60)
    assert body["status"]["admission"] == workload.admission
    assert body["status"]["conditions"] == workload.conditions
    assert body["status"]["resourceRequests"] == []


# --- Lists and filters ------------------------------------------------------------------------


@pytest.fixture
def listed(job: Job, cluster_queue: ClusterQueue, manager: Cluster) -> dict[str, str]:
    """One workload per interesting state; returns names by role in the test."""
    other_cq = ClusterQueue.objects.create(cluster=manager, name="other-cq")
    LocalQueue.objects.create(cluster=manager, namespace="team-b", name="other-queue",
                              cluster_queue=other_cq)
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    admitted = services.create_workload(workload_body()["spec"], namespace="team-a", name="admitted")
    admit(admitted, cluster_queue)
    services.create_workload({**workload_body()["spec"], "queueName": "other-queue",
                              "priorityClassRef": {"name": "high"}},
                             namespace="team-b", name="urgent")
    Workload.objects.filter(name="urgent").update(phase=WorkloadPhase.PENDING)
    finished = services.create_workload(workload_body()["spec"], namespace="team-b", name="done")
    Workload.objects.filter(pk=finished.pk).update(phase=WorkloadPhase.FINISHED)
    return {"job": job.workloads.get().name}


def names(response: Any) -> list[str]:
    assert response.status_code == 200, response.json()
    return [item["metadata"]["name"] for item in response.json()["results"]]


def test_lists_a_namespace_or_every_namespace(admin_client_api: APIClient,
                                              listed: dict[str, str]) -> None:
    assert names(admin_client_api.get(url("team-a"))) == ["admitted", listed["job"]]
    assert names(admin_client_api.get(url("team-b"))) == ["done", "urgent"]
    everything = admin_client_api.get(url())
    assert names(everything) == ["admitted", listed["job"], "done", "urgent"]
    assert everything.json()["count"] == 4


@dataclass(frozen=True)
class FilterCase:
    name: str
    query: str
    want: list[str]


FILTERS = [
    FilterCase("job name", "job=pi", ["JOB"]),
    FilterCase("queue name", "queueName=other-queue", ["urgent"]),
    FilterCase("pending", "phase=Pending", ["JOB", "urgent"]),
    FilterCase("admitted", "phase=Admitted", ["admitted"]),
    FilterCase("finished", "phase=Finished", ["done"]),
    FilterCase("admitted to or waiting for a cluster queue", "clusterQueue=cq",
               ["admitted", "JOB", "done"]),
    FilterCase("waiting for another cluster queue", "clusterQueue=other-cq", ["urgent"]),
    FilterCase("priority", "priority=100", ["urgent"]),
    FilterCase("search in names", "search=URG", ["urgent"]),
    FilterCase("search in job names", "search=pi", ["JOB"]),
    FilterCase("search in namespaces", "search=team-b", ["done", "urgent"]),
    FilterCase("combined", "phase=Pending&queueName=user-queue", ["JOB"]),
]


@pytest.mark.parametrize("case", FILTERS, ids=lambda c: c.name)
def test_filters(admin_client_api: APIClient, listed: dict[str, str], case: FilterCase) -> None:
    response = admin_client_api.get(f"{url()}?{case.query}")

    assert names(response) == [listed["job"] if n == "JOB" else n for n in case.want]


@pytest.mark.parametrize(
    ("query", "want"),
    [("phase=Running", {"phase": [
        "Select a valid choice. Running is not one of the available choices."]}),
     ("priority=high", {"priority": ["Enter a whole number."]})],
    ids=["unknown phase", "priority not a number"],
)
def test_invalid_filters_are_refused(admin_client_api: APIClient, query: str,
                                     want: dict[str, list[str]]) -> None:
    response = admin_client_api.get(f"{url()}?{query}")

    assert (response.status_code, response.json()) == (400, want)


# --- Create, patch, delete ----------------------------------------------------------------------


def test_create_bare_workload(admin_client_api: APIClient, queues: list[LocalQueue]) -> None:
    response = admin_client_api.post(url("team-a"), workload_body(), format="json")

    assert response.status_code == 201, response.json()
    workload = Workload.objects.get(name="bare")
    body = response.json()
    assert body["metadata"]["name"] == "bare"
    assert body["metadata"]["labels"] == {"team": "ml"}
    assert body["spec"] == {
        "podSets": workload_body()["spec"]["podSets"], "queueName": "user-queue",
        "priority": 0, "active": True}
    assert body["status"]["resourceRequests"] == [{"name": "main", "resources": {"cpu": "1"}}]
    assert (workload.local_queue, workload.queued_at) == (queues[0], workload.created_at)


def test_create_with_generate_name(admin_client_api: APIClient, manager: Cluster) -> None:
    body = workload_body()
    body["metadata"] = {"generateName": "batch-"}

    response = admin_client_api.post(url("team-a"), body, format="json")

    assert response.status_code == 201
    assert response.json()["metadata"]["name"].startswith("batch-")
    assert len(response.json()["metadata"]["name"]) == len("batch-") + 5


@dataclass(frozen=True)
class BadBody:
    name: str
    body: Any
    want: dict[str, list[str]]


BAD_BODIES = [
    BadBody("count zero", workload_body(podSets=[{"count": 0, "template": {
        "spec": {"containers": [{"name": "c"}]}}}]),
        {"spec.podSets[0].count": ["must be greater than or equal to 1"]}),
    BadBody("negative request", workload_body(podSets=[{"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"memory": "-1Gi"}}}]}}}]),
        {"spec.podSets[0].template.spec.containers[0].resources.requests.memory": [
            "'-1Gi' must not be negative"]}),
    BadBody("no name", {**workload_body(), "metadata": {}},
            {"metadata.name": ["name or generateName is required"]}),
    BadBody("other namespace", {**workload_body(), "metadata": {"name": "x", "namespace": "team-b"}},
            {"metadata.namespace": ["the namespace of the provided object does not match the "
                                    "namespace sent on the request"]}),
    BadBody("other kind", {**workload_body(), "kind": "Job"}, {"kind": ['must be "Workload"']}),
    BadBody("not an object", [workload_body(), workload_body()],
            {"detail": ["expected one object in the body, found 2 documents"]}),
]


@pytest.mark.parametrize("case", BAD_BODIES, ids=lambda c: c.name)
def test_create_refuses_with_field_paths(admin_client_api: APIClient, manager: Cluster,
                                         case: BadBody) -> None:
    response = admin_client_api.post(url("team-a"), case.body, format="json")

    body = response.json()
    if "detail" in body:
        body = {"detail": [body["detail"]]}
    assert (response.status_code, body) == (400, case.want)
    assert Workload.objects.count() == 0


def test_create_conflicts_with_an_existing_name(admin_client_api: APIClient,
                                                manager: Cluster) -> None:
    assert admin_client_api.post(url("team-a"), workload_body(), format="json").status_code == 201

    response = admin_client_api.post(url("team-a"), workload_body(), format="json")

    assert (response.status_code, response.json()) == (
        409, {"detail": 'workloads.kueue.x-k8s.io "bare" already exists'})


def test_patch_deactivates(admin_client_api: APIClient, job: Job) -> None:
    workload = job.workloads.get()

    response = admin_client_api.patch(
        url("team-a", workload.name), {"spec": {"active": False}, "status": {"admission": {}}},
        format="json")

    assert response.status_code == 200
    assert response.json()["spec"]["active"] is False
    assert response.json()["status"]["admission"] is None
    assert response.json()["metadata"]["resourceVersion"] == "2"
    assert Workload.objects.get(pk=workload.pk).active is False


def test_patch_accepts_merge_patch_media_type(admin_client_api: APIClient, job: Job) -> None:
    workload = job.workloads.get()

    response = admin_client_api.generic(
        "PATCH", url("team-a", workload.name), '{"spec": {"queueName": "elsewhere"}}',
        content_type="application/merge-patch+json")

    assert response.status_code == 200
    assert Workload.objects.get(pk=workload.pk).queue_name == "elsewhere"
    assert Workload.objects.get(pk=workload.pk).local_queue is None


def test_patch_while_reserved_is_refused_with_kueue_message(
    admin_client_api: APIClient, job: Job, cluster_queue: ClusterQueue
) -> None:
    workload = job.workloads.get()
    admit(workload, cluster_queue)

    response = admin_client_api.patch(
        url("team-a", workload.name),
        {"spec": {"queueName": "other", "podSets": [], "active": False}}, format="json")

    assert (response.status_code, response.json()) == (400, {
        "spec.podSets": ["field is immutable"],
        "spec.queueName": ["queueName is immutable while workload quota reserved"],
    })
    assert Workload.objects.get(pk=workload.pk).active is True


def test_delete_removes_the_workload(admin_client_api: APIClient, job: Job) -> None:
    workload = job.workloads.get()

    response = admin_client_api.delete(url("team-a", workload.name))

    assert response.status_code == 204
    assert Workload.objects.count() == 0


def test_unknown_workload_and_cluster_are_not_found(admin_client_api: APIClient,
                                                   manager: Cluster) -> None:
    missing = admin_client_api.get(url("team-a", "missing"))
    no_cluster = admin_client_api.get(f"{url()}?cluster=nowhere")

    assert (missing.status_code, missing.json()) == (
        404, {"detail": 'workloads.kueue.x-k8s.io "missing" not found'})
    assert (no_cluster.status_code, no_cluster.json()) == (
        404, {"detail": 'clusters "nowhere" not found'})


def test_cluster_parameter_addresses_another_domain(admin_client_api: APIClient,
                                                    manager: Cluster) -> None:
    Cluster.objects.create(name="worker-1", role="worker")
    created = admin_client_api.post(f"{url('team-a')}?cluster=worker-1", workload_body(),
                                     format="json")
    admin_client_api.post(url("team-a"), workload_body(), format="json")

    on_worker = admin_client_api.get(f"{url('team-a', 'bare')}?cluster=worker-1")

    assert created.status_code == 201
    assert created.json()["metadata"]["cluster"] == "worker-1"
    assert on_worker.json()["metadata"]["uid"] != admin_client_api.get(
        url("team-a", "bare")).json()["metadata"]["uid"]
    assert names(admin_client_api.get(f"{url()}?cluster=worker-1")) == ["bare"]
    assert Workload.objects.filter(name="bare").count() == 2


def test_routes_answer_without_trailing_slash(admin_client_api: APIClient, job: Job) -> None:
    workload = job.workloads.get()

    assert admin_client_api.get("/api/v1/workloads").status_code == 200
    assert admin_client_api.get(f"/api/v1/namespaces/team-a/workloads/{workload.name}").status_code == 200
    assert admin_client_api.post("/api/v1/namespaces/team-a/workloads", workload_body(),
                                 format="json").status_code == 201


# --- Roles ------------------------------------------------------------------------------------


@pytest.fixture
def clients(anon_client: APIClient, viewer_client: APIClient, operator_client: APIClient,
            admin_client_api: APIClient) -> dict[str, APIClient]:
    return {"anonymous": anon_client, "viewer": viewer_client, "operator": operator_client,
            "admin": admin_client_api}


@pytest.fixture
def two_namespaces(manager: Cluster) -> None:
    for namespace in ("team-a", "team-b"):
        services.create_workload(workload_body()["spec"], namespace=namespace, name="wl")


ROLE_CASES = [
    # (method, path, {role: status})
    ("get", url(), {"anonymous": 401, "viewer": 200, "operator": 200, "admin": 200}),
    ("get", url("team-b"), {"anonymous": 401, "viewer": 200, "operator": 200, "admin": 200}),
    ("get", url("team-b", "wl"), {"anonymous": 401, "viewer": 200, "operator": 200, "admin": 200}),
    ("post", url("team-a"), {"anonymous": 401, "viewer": 403, "operator": 201, "admin": 201}),
    ("post", url("team-b"), {"anonymous": 401, "viewer": 403, "operator": 403, "admin": 201}),
    ("patch", url("team-a", "wl"), {"anonymous": 401, "viewer": 403, "operator": 200, "admin": 200}),
    ("patch", url("team-b", "wl"), {"anonymous": 401, "viewer": 403, "operator": 403, "admin": 200}),
    ("delete", url("team-a", "wl"), {"anonymous": 401, "viewer": 403, "operator": 204, "admin": 204}),
    ("delete", url("team-b", "wl"), {"anonymous": 401, "viewer": 403, "operator": 403, "admin": 204}),
]


@pytest.mark.parametrize("role", ["anonymous", "viewer", "operator", "admin"])
@pytest.mark.parametrize(("method", "path", "want"), ROLE_CASES,
                         ids=[f"{m} {p}" for m, p, _ in ROLE_CASES])
def test_roles(clients: dict[str, APIClient], two_namespaces: None, role: str, method: str,
               path: str, want: dict[str, int]) -> None:
    body = {"post": workload_body("new"), "patch": {"spec": {"active": False}}}.get(method)

    response = getattr(clients[role], method)(path, body, format="json")

    assert response.status_code == want[role]
    expected_rows = {("post", 201): 3, ("delete", 204): 1}.get((method, response.status_code), 2)
    assert Workload.objects.count() == expected_rows
    if method == "patch" and response.status_code != 200:
        assert Workload.objects.filter(active=False).count() == 0
