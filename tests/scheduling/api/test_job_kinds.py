"""Jobs of two kinds sharing a name in one namespace, as Kubernetes allows: each is read,
changed and deleted through ``?kind=``, and a name alone is refused on ``kind`` while it is
ambiguous."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/namespaces/team-a/jobs/"
WORKLOADS = "/api/v1/namespaces/team-a/workloads/"
CONTAINER = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
LABELS = {jobframework.QUEUE_NAME_LABEL: "user-queue"}


def batch_job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": LABELS},
            "spec": {"parallelism": 2, "template": {"spec": {
                "containers": [CONTAINER], "restartPolicy": "Never"}}}}


def jobset(name: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": LABELS},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 3, "template": {
                "spec": {"template": {"spec": {"containers": [CONTAINER],
                                               "restartPolicy": "Never"}}}}}]}}


@pytest.fixture
def twins(manager: Cluster, admin_client_api: APIClient) -> APIClient:
    """A Job and a JobSet, both named "train", in namespace team-a."""
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    LocalQueue.objects.create(cluster=manager, namespace="team-a", name="user-queue",
                              cluster_queue=cq)
    for body, kind in ((batch_job("train"), "Job"), (jobset("train"), "JobSet")):
        response = admin_client_api.post(JOBS, body, format="json")
        assert response.status_code == 201, response.content
        assert response["Location"] == f"{JOBS}train/?kind={kind}"
    return admin_client_api


def workload_names(client: APIClient, query: str) -> list[str]:
    response = client.get(WORKLOADS + query)
    assert response.status_code == 200, response.content
    return sorted(item["metadata"]["name"] for item in response.json()["results"])


def test_both_kinds_are_stored_with_their_own_workloads(twins: APIClient) -> None:
    assert sorted(Job.objects.values_list("kind", "name")) == [("Job", "train"),
                                                                ("JobSet", "train")]
    job_wl = Workload.objects.get(job__kind="Job").name
    jobset_wl = Workload.objects.get(job__kind="JobSet").name
    assert job_wl.startswith("job-train-")
    assert jobset_wl.startswith("jobset-train-")
    assert workload_names(twins, "?job=train") == sorted([job_wl, jobset_wl])
    assert workload_names(twins, "?job=train&jobKind=JobSet") == [jobset_wl]
    assert workload_names(twins, "?job=train&jobKind=Job") == [job_wl]


def test_each_is_read_by_its_kind(twins: APIClient) -> None:
    for query, kind in (("?kind=Job", "Job"), ("?kind=JobSet", "JobSet"),
                        ("?kind=jobset", "JobSet"), ("?kind=JobSet.jobset.x-k8s.io", "JobSet"),
                        ("?kind=Job.batch", "Job")):
        response = twins.get(f"{JOBS}train/{query}")
        assert response.status_code == 200, (query, response.content)
        assert (response.json()["kind"], response.json()["metadata"]["name"]) == (kind, "train")


def test_a_name_two_kinds_share_is_refused_without_the_kind(twins: APIClient) -> None:
    for method in ("get", "delete", "patch"):
        response = getattr(twins, method)(f"{JOBS}train/", {}, format="json")
        assert response.status_code == 400, (method, response.content)
        (message,) = response.json()["kind"]
        assert "several kinds are named 'train' (Job, JobSet)" in message
    assert Job.objects.count() == 2


def test_an_unknown_or_malformed_kind(twins: APIClient) -> None:
    missing = twins.get(f"{JOBS}train/?kind=RayCluster")
    assert (missing.status_code, missing.json()) == (
        404, {"detail": 'rayclusters.ray.io "train" not found'})
    other_group = twins.get(f"{JOBS}train/?kind=JobSet.example.com")
    assert other_group.status_code == 404
    malformed = twins.get(f"{JOBS}train/?kind=job-set")
    assert malformed.status_code == 400
    assert list(malformed.json()) == ["kind"]


def test_deleting_one_keeps_the_other(twins: APIClient) -> None:
    assert twins.delete(f"{JOBS}train/?kind=Job").status_code == 204

    assert list(Job.objects.values_list("kind", flat=True)) == ["JobSet"]
    assert [wl.job.kind for wl in Workload.objects.select_related("job")] == ["JobSet"]
    # The name is no longer ambiguous: it alone finds the JobSet again.
    response = twins.get(f"{JOBS}train/")
    assert (response.status_code, response.json()["kind"]) == (200, "JobSet")
    assert workload_names(twins, "?job=train") == [Workload.objects.get().name]


def test_a_kind_may_not_have_the_name_twice(twins: APIClient) -> None:
    response = twins.post(JOBS, jobset("train"), format="json")
    assert (response.status_code, response.json()) == (
        409, {"detail": 'jobsets.jobset.x-k8s.io "train" already exists'})


def test_each_is_scaled_by_its_kind(twins: APIClient) -> None:
    response = twins.patch(f"{JOBS}train/?kind=Job", {"spec": {"parallelism": 1}},
                           format="json")
    assert response.status_code == 200, response.content
    assert Workload.objects.get(job__kind="Job").pod_sets[0]["count"] == 1
    assert Workload.objects.get(job__kind="JobSet").pod_sets[0]["count"] == 3
