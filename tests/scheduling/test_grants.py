"""What a namespace grant lets an operator submit: pod templates at the grant's Pod Security
Standards level and service accounts, and a priority only from allowed classes (or 0).
Jobs and Workloads, through the API and the browser; admins are not bound."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from kueueweb.models import NamespaceGrant
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.manifests.yamlio import dump_documents
from scheduling.models import (
    ClusterQueue,
    Job,
    LocalQueue,
    PriorityClass,
    Workload,
    WorkloadPriorityClass,
)
from tests.fixtures.accounts import ui_client_for

pytestmark = pytest.mark.django_db

MAX_INT32 = 2**31 - 1
ESCAPE_SPEC: dict[str, Any] = {
    "hostPID": True, "hostNetwork": True, "serviceAccountName": "cluster-admin",
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "root", "mountPath": "/host"}],
                    "resources": {"requests": {"cpu": "1"}}}],
    "restartPolicy": "Never",
}
ESCAPE_PATHS = {
    "spec.template.spec.hostNetwork", "spec.template.spec.hostPID",
    "spec.template.spec.volumes[0].hostPath",
    "spec.template.spec.containers[0].securityContext.privileged",
    "spec.template.spec.serviceAccountName",
}


def job(name: str = "pi", pod_spec: dict[str, Any] | None = None, **labels: str
        ) -> dict[str, Any]:
    spec = pod_spec or {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1"}}}],
                        "restartPolicy": "Never"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue", **labels}},
            "spec": {"parallelism": 1, "template": {"spec": copy.deepcopy(spec)}}}


def workload(name: str = "bare", pod_spec: dict[str, Any] | None = None, **spec: Any
             ) -> dict[str, Any]:
    pod = pod_spec or {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    return {"metadata": {"name": name},
            "spec": {"queueName": "user-queue", **spec,
                     "podSets": [{"name": "main", "count": 1,
                                  "template": {"spec": copy.deepcopy(pod)}}]}}


@pytest.fixture
def domain(manager: Cluster) -> Cluster:
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    for namespace in ("team-a", "team-b"):
        LocalQueue.objects.create(cluster=manager, namespace=namespace, name="user-queue",
                                  cluster_queue=cq)
    WorkloadPriorityClass.objects.create(cluster=manager, name="low", value=10)
    WorkloadPriorityClass.objects.create(cluster=manager, name="urgent", value=MAX_INT32)
    return manager


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def jobs_url(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/jobs/"


def workloads_url(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/workloads/" + (f"{name}/" if name else "")


# --- Pod Security Standards and service accounts ------------------------------------------


def test_an_operator_escape_job_is_refused_by_check_and_field(
    operator_client: APIClient, domain: Cluster
) -> None:
    response = operator_client.post(jobs_url("team-a"), job(pod_spec=ESCAPE_SPEC), format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == ESCAPE_PATHS
    assert "check privileged" in errors[
        "spec.template.spec.containers[0].securityContext.privileged"][0]
    assert "check hostNamespaces" in errors["spec.template.spec.hostPID"][0]
    assert "'cluster-admin' is not allowed" in errors["spec.template.spec.serviceAccountName"][0]
    assert not Job.objects.exists()
    assert not Workload.objects.exists()


def test_an_admin_is_not_bound(admin_client_api: APIClient, domain: Cluster) -> None:
    response = admin_client_api.post(jobs_url("team-a"), job(pod_spec=ESCAPE_SPEC), format="json")
    assert response.status_code == 201, response.json()


def test_the_grant_sets_the_level_and_the_service_accounts(
    operator: User, operator_client: APIClient, domain: Cluster
) -> None:
    NamespaceGrant.objects.filter(user=operator).update(
        pod_security_level="privileged", allowed_service_accounts="cluster-admin")
    response = operator_client.post(jobs_url("team-a"), job(pod_spec=ESCAPE_SPEC), format="json")
    assert response.status_code == 201, response.json()

    NamespaceGrant.objects.filter(user=operator).update(pod_security_level="restricted")
    response = operator_client.post(jobs_url("team-a"), job("plain"), format="json")
    assert response.status_code == 400
    assert "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation" in (
        response.json())


def test_the_namespace_grant_wins_over_the_star_grant(
    make_user: Callable[..., User], domain: Cluster
) -> None:
    user = make_user("olga", "operator", namespaces=("*",))
    NamespaceGrant.objects.create(user=user, namespace="team-b", pod_security_level="privileged")
    client = client_for(user)
    assert client.post(jobs_url("team-b"), job(pod_spec=ESCAPE_SPEC | {
        "serviceAccountName": "default"}), format="json").status_code == 201
    assert client.post(jobs_url("team-a"), job(pod_spec=ESCAPE_SPEC),
                       format="json").status_code == 400


def test_a_workload_pod_set_is_checked(operator_client: APIClient, domain: Cluster) -> None:
    response = operator_client.post(workloads_url("team-a"), workload(pod_spec=ESCAPE_SPEC),
                                    format="json")
    assert response.status_code == 400
    assert set(response.json()) == {
        path.replace("spec.template", "spec.podSets[0].template") for path in ESCAPE_PATHS}
    assert not Workload.objects.exists()


def test_the_browser_form_refuses_a_privileged_job(operator: User, domain: Cluster) -> None:
    response = ui_client_for(operator).post("/jobs/new/", {
        "namespace": "team-a", "manifest": dump_documents([job(pod_spec=ESCAPE_SPEC)])})
    assert response.status_code == 200
    assert "spec.template.spec.containers[0].securityContext.privileged" in (
        response.content.decode())
    assert not Job.objects.exists()


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_system_namespaces_are_refused_to_everyone(
    admin_client_api: APIClient, domain: Cluster, namespace: str
) -> None:
    for url, body in ((jobs_url(namespace), job()), (workloads_url(namespace), workload())):
        response = admin_client_api.post(url, body, format="json")
        assert response.status_code == 400
        assert "system namespace" in response.json()["metadata.namespace"][0]
    assert not Job.objects.exists()
    assert not Workload.objects.exists()


# --- priority -------------------------------------------------------------------------------


def test_an_operator_may_not_set_a_raw_priority(
    make_user: Callable[..., User], domain: Cluster
) -> None:
    # team-a's operator, through a local queue of team-b's cluster queue.
    client = client_for(make_user("mallory", "operator", namespaces=("team-b",)))
    response = client.post(workloads_url("team-b"), workload(priority=MAX_INT32), format="json")
    assert response.status_code == 400
    assert "only an admin may set a priority" in response.json()["spec.priority"][0]
    assert not Workload.objects.exists()
    response = client.post(workloads_url("team-b"), workload(priority=0), format="json")
    assert response.status_code == 201, response.json()
    assert Workload.objects.get().priority == 0


def test_a_pod_priority_class_gives_an_operator_no_priority(
    operator_client: APIClient, domain: Cluster
) -> None:
    body = workload(priorityClassRef={"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                      "name": "system-cluster-critical"}, priority=2000000000)
    response = operator_client.post(workloads_url("team-a"), body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["spec.priority"]


def test_an_admin_may_set_a_raw_priority(admin_client_api: APIClient, domain: Cluster) -> None:
    response = admin_client_api.post(workloads_url("team-a"), workload(priority=MAX_INT32),
                                     format="json")
    assert response.status_code == 201, response.json()
    assert Workload.objects.get().priority == MAX_INT32


def test_a_priority_class_gives_the_priority(operator_client: APIClient, domain: Cluster) -> None:
    body = workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                      "name": "low"})
    response = operator_client.post(workloads_url("team-a"), body, format="json")
    assert response.status_code == 201, response.json()
    assert Workload.objects.get().priority == 10


def test_the_grant_limits_the_priority_classes(
    operator: User, operator_client: APIClient, domain: Cluster
) -> None:
    NamespaceGrant.objects.filter(user=operator).update(allowed_priority_classes="low")
    body = workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                      "name": "urgent"})
    response = operator_client.post(workloads_url("team-a"), body, format="json")
    assert response.status_code == 400
    assert "'urgent' may not be used" in response.json()["spec.priorityClassRef.name"][0]
    labelled = job(**{jobframework.PRIORITY_CLASS_LABEL: "urgent"})
    response = operator_client.post(jobs_url("team-a"), labelled, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [jobframework.label_path(jobframework.PRIORITY_CLASS_LABEL)]
    labelled = job(**{jobframework.PRIORITY_CLASS_LABEL: "low"})
    assert operator_client.post(jobs_url("team-a"), labelled, format="json").status_code == 201
    assert not Workload.objects.filter(priority=MAX_INT32).exists()


def test_the_grant_limits_a_jobs_pod_priority_class(
    operator: User, operator_client: APIClient, domain: Cluster
) -> None:
    """The template's PriorityClass gives the Workload its value (Kueue ``ExtractPriority``),
    so the grant's allowed classes bound it as they bound the label."""
    PriorityClass.objects.create(cluster=domain, name="urgent", value=1_000_000)
    PriorityClass.objects.create(cluster=domain, name="low", value=5)
    NamespaceGrant.objects.filter(user=operator).update(allowed_priority_classes="low")
    pod_spec = {"priorityClassName": "urgent", "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}}}]}
    response = operator_client.post(jobs_url("team-a"), job(pod_spec=pod_spec), format="json")
    assert response.status_code == 400
    assert response.json() == {"spec.template.spec.priorityClassName": [
        "PriorityClass 'urgent' may not be used in namespace 'team-a' (allowed: low)"]}
    assert not Workload.objects.exists()
    pod_spec["priorityClassName"] = "low"
    assert operator_client.post(jobs_url("team-a"), job(pod_spec=pod_spec),
                                format="json").status_code == 201
    assert Workload.objects.get().priority == 5


def test_an_operator_may_not_patch_a_raw_priority_in(
    operator_client: APIClient, admin_client_api: APIClient, domain: Cluster
) -> None:
    assert operator_client.post(workloads_url("team-a"), workload(),
                                format="json").status_code == 201
    patch = {"spec": {"priority": MAX_INT32}}
    response = operator_client.patch(workloads_url("team-a", "bare"), patch, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["spec.priority"]
    assert Workload.objects.get().priority == 0
    # Deactivating a workload whose priority an admin set is not a priority change.
    assert admin_client_api.patch(workloads_url("team-a", "bare"), patch,
                                  format="json").status_code == 200
    response = operator_client.patch(workloads_url("team-a", "bare"),
                                     {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    assert Workload.objects.get().priority == MAX_INT32


def test_an_anonymous_caller_of_the_service_gets_the_default_grant(domain: Cluster) -> None:
    body = workload(priority=MAX_INT32)
    with pytest.raises(ValidationError) as refused:
        services.create_workload(body["spec"], namespace="team-a", name="anon",
                                 cluster=domain, user=AnonymousUser())
    assert list(refused.value.message_dict) == ["spec.priority"]
