"""/api/v1/.../jobs: batch/v1 Job submission as JSON or YAML, reads, deletion and roles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload

pytestmark = pytest.mark.django_db

SAMPLE_JOB = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs" / "sample-job.yaml"


def iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


def manifest(name: str = "pi", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue", **labels}},
        "spec": {
            "parallelism": 2,
            "template": {"spec": {
                "containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}}}],
                "restartPolicy": "Never",
            }},
        },
    }


def jobs_url(namespace: str | None = None, name: str | None = None) -> str:
    if namespace is None:
        return "/api/v1/jobs/"
    base = f"/api/v1/namespaces/{namespace}/jobs/"
    return f"{base}{name}/" if name else base


@pytest.fixture
def queues(manager: Cluster) -> None:
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    for namespace in ("default", "team-a", "team-b"):
        LocalQueue.objects.create(cluster=manager, namespace=namespace, name="user-queue",
                                  cluster_queue=cq)


def test_submit_json_answers_with_the_manifest_and_status(
    admin_client_api: APIClient, queues: None
) -> None:
    response = admin_client_api.post(jobs_url("team-a"), manifest(), format="json")

    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert response["Location"] == "/api/v1/namespaces/team-a/jobs/pi/?kind=Job"
    assert response.json() == {
        **manifest(),
        "metadata": {
            **manifest()["metadata"],
            "namespace": "team-a",
            "uid": str(job.uid),
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": iso(job.created_at),
            "cluster": "manager",
            "source": "kueueweb",
        },
        "status": {},
    }
    workload = Workload.objects.get()
    assert (workload.job, workload.pod_sets[0]["count"]) == (job, 2)


def test_submit_without_trailing_slash(admin_client_api: APIClient, queues: None) -> None:
    response = admin_client_api.post("/api/v1/namespaces/team-a/jobs", manifest(), format="json")

    assert response.status_code == 201
    assert Job.objects.get().name == "pi"


@pytest.mark.parametrize("content_type", ["application/yaml", "text/yaml"])
def test_submit_kueue_sample_job_as_yaml(admin_client_api: APIClient, queues: None,
                                         content_type: str) -> None:
    response = admin_client_api.generic(
        "POST", jobs_url("default"), SAMPLE_JOB.read_bytes(), content_type=content_type)

    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.name.startswith("sample-job-")
    assert response.json()["metadata"]["generateName"] == "sample-job-"
    assert response.json()["spec"] == yaml.safe_load(SAMPLE_JOB.read_text())["spec"]
    workload = Workload.objects.get()
    assert (workload.queue_name, workload.pod_sets[0]["count"]) == ("user-queue", 3)
    listed = admin_client_api.get(f"/api/v1/namespaces/default/workloads/?job={job.name}")
    assert [w["metadata"]["name"] for w in listed.json()["results"]] == [workload.name]


def test_yaml_aliases_are_refused(admin_client_api: APIClient, queues: None) -> None:
    body = (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\n  labels: &l\n"
        "    kueue.x-k8s.io/queue-name: user-queue\nspec:\n  template:\n    metadata:\n"
        "      labels: *l\n    spec:\n      containers: [{name: c, image: busybox}]\n"
        "      restartPolicy: Never\n"
    )

    response = admin_client_api.generic("POST", jobs_url("team-a"), body,
                                        content_type="application/yaml")

    message = ("YAML anchors and aliases are not accepted (line 5, column 11): write the value "
               "out in full")
    assert (response.status_code, response.json()) == (400, {"detail": message,
                                                             "body": [message]})
    assert Job.objects.count() == 0


def test_one_job_per_request(admin_client_api: APIClient, queues: None) -> None:
    body = yaml.safe_dump(manifest("a")) + "---\n" + yaml.safe_dump(manifest("b"))

    response = admin_client_api.generic("POST", jobs_url("team-a"), body,
                                        content_type="application/yaml")

    message = "expected one object in the body, found 2 documents"
    assert (response.status_code, response.json()) == (400, {"detail": message,
                                                             "body": [message]})
    assert Job.objects.count() == 0


def test_invalid_json_is_refused(admin_client_api: APIClient, queues: None) -> None:
    response = admin_client_api.generic("POST", jobs_url("team-a"), '{"kind": "Job",',
                                        content_type="application/json")

    assert response.status_code == 400
    assert response.json()["detail"].startswith("not valid JSON: ")


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_body_size_is_limited(admin_client_api: APIClient, queues: None, settings: Any,
                              content_type: str) -> None:
    body = json.dumps(manifest())
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MAX_MANIFEST_BYTES": 100}

    response = admin_client_api.generic("POST", jobs_url("team-a"), body,
                                        content_type=content_type)

    assert (response.status_code, response.json()) == (413, {"detail": (
        f"manifests are {len(body)} bytes; at most 100 bytes are accepted "
        "(KUEUEWEB_MAX_MANIFEST_BYTES)")})
    assert Job.objects.count() == 0


def test_body_at_the_size_limit_is_accepted(admin_client_api: APIClient, queues: None,
                                            settings: Any) -> None:
    body = json.dumps(manifest())
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MAX_MANIFEST_BYTES": len(body)}

    response = admin_client_api.generic("POST", jobs_url("team-a"), body,
                                        content_type="application/json")

    assert response.status_code == 201


def test_field_errors_name_the_field(admin_client_api: APIClient, queues: None) -> None:
    body = manifest()
    body["spec"]["parallelism"] = -1
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "-1"}}

    response = admin_client_api.post(jobs_url("team-a"), body, format="json")

    assert (response.status_code, response.json()) == (400, {
        "spec.parallelism": ["must be greater than or equal to 0"],
        "spec.template.spec.containers[0].resources.requests.cpu": ["'-1' must not be negative"],
    })
    assert (Job.objects.count(), Workload.objects.count()) == (0, 0)


def test_missing_priority_class_is_named(admin_client_api: APIClient, queues: None) -> None:
    body = manifest(**{jobframework.PRIORITY_CLASS_LABEL: "urgent"})

    response = admin_client_api.post(jobs_url("team-a"), body, format="json")

    assert (response.status_code, response.json()) == (400, {
        "metadata.labels[kueue.x-k8s.io/priority-class]": [
            "WorkloadPriorityClass 'urgent' not found in cluster 'manager'"]})


def test_duplicate_name_conflicts(admin_client_api: APIClient, queues: None) -> None:
    admin_client_api.post(jobs_url("team-a"), manifest(), format="json")

    response = admin_client_api.post(jobs_url("team-a"), manifest(), format="json")

    assert (response.status_code, response.json()) == (409, {"detail": 'jobs.batch "pi" already exists'})
    assert Job.objects.count() == 1


def test_read_list_and_delete(admin_client_api: APIClient, queues: None) -> None:
    admin_client_api.post(jobs_url("team-a"), manifest("a"), format="json")
    admin_client_api.post(jobs_url("team-b"), manifest("b"), format="json")

    detail = admin_client_api.get(jobs_url("team-a", "a"))
    in_namespace = admin_client_api.get(jobs_url("team-a"))
    everywhere = admin_client_api.get(jobs_url())
    searched = admin_client_api.get(f"{jobs_url()}?search=team-b")
    deleted = admin_client_api.delete(jobs_url("team-a", "a"))
    missing = admin_client_api.get(jobs_url("team-a", "a"))

    assert detail.status_code == 200
    assert (detail.json()["metadata"]["name"], detail.json()["status"]) == ("a", {})
    assert [j["metadata"]["name"] for j in in_namespace.json()["results"]] == ["a"]
    assert [j["metadata"]["name"] for j in everywhere.json()["results"]] == ["a", "b"]
    assert [j["metadata"]["name"] for j in searched.json()["results"]] == ["b"]
    assert deleted.status_code == 204
    assert (missing.status_code, missing.json()) == (404, {"detail": 'jobs "a" not found'})
    assert list(Workload.objects.values_list("job__name", flat=True)) == ["b"]


def test_cluster_parameter_submits_to_another_domain(admin_client_api: APIClient,
                                                     queues: None) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")

    response = admin_client_api.post(f"{jobs_url('team-a')}?cluster=worker-1", manifest(),
                                     format="json")

    assert response.status_code == 201
    assert response.json()["metadata"]["cluster"] == "worker-1"
    assert Workload.objects.get().cluster == worker
    assert admin_client_api.get(jobs_url("team-a", "pi")).status_code == 404
    assert admin_client_api.get(f"{jobs_url('team-a', 'pi')}?cluster=worker-1").status_code == 200


# --- Roles ------------------------------------------------------------------------------------


@pytest.fixture
def clients(anon_client: APIClient, viewer_client: APIClient, operator_client: APIClient,
            admin_client_api: APIClient) -> dict[str, APIClient]:
    return {"anonymous": anon_client, "viewer": viewer_client, "operator": operator_client,
            "admin": admin_client_api}


@pytest.fixture
def two_jobs(queues: None, admin_client_api: APIClient) -> None:
    for namespace in ("team-a", "team-b"):
        assert admin_client_api.post(jobs_url(namespace), manifest("pi"),
                                     format="json").status_code == 201


ROLE_CASES = [
    ("get", jobs_url(), {"anonymous": 401, "viewer": 200, "operator": 200, "admin": 200}),
    ("get", jobs_url("team-b"), {"anonymous": 401, "viewer": 200, "operator": 200, "admin": 200}),
    ("get", jobs_url("team-b", "pi"), {"anonymous": 401, "viewer": 200, "operator": 200,
                                       "admin": 200}),
    ("post", jobs_url("team-a"), {"anonymous": 401, "viewer": 403, "operator": 201, "admin": 201}),
    ("post", jobs_url("team-b"), {"anonymous": 401, "viewer": 403, "operator": 403, "admin": 201}),
    ("post", "/api/v1/namespaces/team-b/jobs", {"anonymous": 401, "viewer": 403, "operator": 403,
                                                "admin": 201}),
    ("delete", jobs_url("team-a", "pi"), {"anonymous": 401, "viewer": 403, "operator": 204,
                                          "admin": 204}),
    ("delete", jobs_url("team-b", "pi"), {"anonymous": 401, "viewer": 403, "operator": 403,
                                          "admin": 204}),
]


@pytest.mark.parametrize("role", ["anonymous", "viewer", "operator", "admin"])
@pytest.mark.parametrize(("method", "path", "want"), ROLE_CASES,
                         ids=[f"{m} {p}" for m, p, _ in ROLE_CASES])
def test_roles(clients: dict[str, APIClient], two_jobs: None, role: str, method: str,
               path: str, want: dict[str, int]) -> None:
    body = manifest("new") if method == "post" else None

    response = getattr(clients[role], method)(path, body, format="json")

    assert response.status_code == want[role]
    expected = {("post", 201): 3, ("delete", 204): 1}.get((method, response.status_code), 2)
    assert (Job.objects.count(), Workload.objects.count()) == (expected, expected)


def test_jobs_and_their_workloads_filter_by_kind(
    admin_client_api: APIClient, queues: None
) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "trainer",
                     "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": {
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}],
                     "restartPolicy": "Never"}}}}}]},
    }
    for body in (manifest("pi"), jobset):
        created = admin_client_api.post(jobs_url("team-a"), body, format="json")
        assert created.status_code == 201, created.content

    def names(url: str) -> list[str]:
        response = admin_client_api.get(url)
        assert response.status_code == 200, response.content
        return sorted(item["metadata"]["name"] for item in response.json()["results"])

    assert names(jobs_url() + "?kind=JobSet") == ["trainer"]
    assert names(jobs_url() + "?kind=Job") == ["pi"]
    assert names(jobs_url() + "?kind=RayCluster") == []
    workloads = "/api/v1/namespaces/team-a/workloads/"
    jobset_workload = Workload.objects.get(job__kind="JobSet").name
    assert names(workloads + "?jobKind=JobSet") == [jobset_workload]
    assert names(workloads + "?job=trainer&jobKind=Job") == []
