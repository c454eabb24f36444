"""Scaling jobs over REST: ``POST .../jobs/{name}/scale`` and a merge patch of
``spec.parallelism`` (elastic jobs, workload slices), their errors, roles and schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduling import jobframework, services
from scheduling.choices import JobSource, WorkloadPhase
from scheduling.jobs import job as batch_job
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.workload import slices
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

ELASTIC = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
MERGE_PATCH = "application/merge-patch+json"


def job_url(name: str, namespace: str = "team-a") -> str:
    return f"/api/v1/namespaces/{namespace}/jobs/{name}/"


def scale_url(name: str, namespace: str = "team-a") -> str:
    return f"{job_url(name, namespace)}scale/"


def workloads(job: Job) -> list[Workload]:
    return slices.ordered(Workload.objects.filter(job=job))


def patch(client: APIClient, url: str, body: Any, content_type: str = MERGE_PATCH) -> Any:
    return client.patch(url, json.dumps(body), content_type=content_type)


@pytest.fixture
def queue(make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    return make_queue("cq", {"cpu": "10"}, namespace="team-a")


def submit(name: str, *, parallelism: int = 3, annotations: dict[str, str] | None = None,
           namespace: str = "team-a") -> Job:
    return services.submit_job(
        job_manifest(name, "lq-cq", parallelism=parallelism, run_seconds=1000,
                     annotations=annotations),
        namespace=namespace)


@pytest.fixture
def running_elastic(queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime) -> Job:
    job = submit("elastic", annotations=ELASTIC)
    reconcilers.step(t0)
    (wl,) = workloads(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def running_plain(queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime) -> Job:
    job = submit("plain")
    reconcilers.step(t0)
    (wl,) = workloads(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return Job.objects.get(pk=job.pk)


# =========================================================================================
# POST .../scale
# =========================================================================================


def test_scale_up_creates_a_slice_and_answers_with_the_job(
    operator_client: APIClient, running_elastic: Job, reconcilers: Reconcilers, t0: datetime,
) -> None:
    response = operator_client.post(scale_url("elastic"), {"parallelism": 5}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == operator_client.get(job_url("elastic")).json()
    assert response.json()["spec"]["parallelism"] == 5
    old, new = workloads(running_elastic)
    assert (old.phase, new.phase) == (WorkloadPhase.ADMITTED, WorkloadPhase.PENDING)
    assert new.pod_sets[0]["count"] == 5
    assert new.annotations[slices.WORKLOAD_SLICE_REPLACEMENT_FOR] == f"team-a/{old.name}"
    assert Event.objects.filter(object_kind="Job", object_name="elastic",
                                reason="ScaledUp").exists()

    reconcilers.step(t0 + timedelta(seconds=5))
    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.phase, new.phase) == (WorkloadPhase.FINISHED, WorkloadPhase.ADMITTED)


def test_scale_down_shrinks_the_admitted_slice_in_place(
    operator_client: APIClient, running_elastic: Job,
) -> None:
    response = operator_client.post(scale_url("elastic"), {"parallelism": 1}, format="json")

    assert response.status_code == 200, response.json()
    (wl,) = workloads(running_elastic)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert wl.pod_sets[0]["count"] == 1
    assert Job.objects.get(pk=running_elastic.pk).manifest["spec"]["parallelism"] == 1


def test_scale_a_queued_job_changes_its_pending_workload(
    admin_client_api: APIClient, queue: ClusterQueue,
) -> None:
    job = submit("queued")  # not elastic: a queued job may still change its size

    response = admin_client_api.post(scale_url("queued"), {"parallelism": 4}, format="json")

    assert response.status_code == 200, response.json()
    (wl,) = workloads(job)
    assert (wl.phase, wl.pod_sets[0]["count"]) == (WorkloadPhase.PENDING, 4)


def test_scale_without_trailing_slash(admin_client_api: APIClient, queue: ClusterQueue) -> None:
    submit("queued")
    response = admin_client_api.post("/api/v1/namespaces/team-a/jobs/queued/scale",
                                     {"parallelism": 2}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["parallelism"] == 2


def test_an_admitted_job_that_is_not_elastic_is_refused_by_field(
    operator_client: APIClient, running_plain: Job,
) -> None:
    response = operator_client.post(scale_url("plain"), {"parallelism": 5}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["spec.parallelism"]
    assert "elastic" in body["spec.parallelism"][0]
    assert Job.objects.get(pk=running_plain.pk).manifest["spec"]["parallelism"] == 3
    assert len(workloads(running_plain)) == 1


def test_partial_admission_while_running_is_refused_with_kueues_message(
    operator_client: APIClient, queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    submit("partial", annotations={batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "1"})
    reconcilers.step(t0)

    response = operator_client.post(scale_url("partial"), {"parallelism": 2}, format="json")

    assert response.status_code == 400
    assert response.json() == {"spec.parallelism": [
        "Forbidden: cannot change when partial admission is enabled and the job is not "
        "suspended"]}


@pytest.mark.parametrize("value", [-1, "five", True, 2**31, None, 1.5])
def test_a_bad_parallelism_is_named(operator_client: APIClient, running_elastic: Job,
                                    value: Any) -> None:
    response = operator_client.post(scale_url("elastic"), {"parallelism": value}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["spec.parallelism"]
    assert len(workloads(running_elastic)) == 1


@pytest.mark.parametrize(("body", "field"), [
    ({}, "parallelism"),
    ({"parallelism": 4, "replicas": 4}, "replicas"),
    ([4], "detail"),  # the parser wants one object
])
def test_a_malformed_body_is_named(operator_client: APIClient, running_elastic: Job,
                                   body: Any, field: str) -> None:
    response = operator_client.post(scale_url("elastic"), body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert Job.objects.get(pk=running_elastic.pk).manifest["spec"]["parallelism"] == 3


def test_scaling_a_finished_job_is_refused(
    operator_client: APIClient, running_elastic: Job,
) -> None:
    Job.objects.filter(pk=running_elastic.pk).update(status={"conditions": [
        {"type": "Complete", "status": "True", "reason": "", "message": ""}]})

    response = operator_client.post(scale_url("elastic"), {"parallelism": 5}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["spec.parallelism"]


def test_an_unknown_job_is_not_found(operator_client: APIClient, queue: ClusterQueue) -> None:
    response = operator_client.post(scale_url("nope"), {"parallelism": 2}, format="json")
    assert response.status_code == 404
    assert patch(operator_client, job_url("nope"), {"spec": {"parallelism": 2}}).status_code == 404


def test_a_conflict_is_409(operator_client: APIClient, running_elastic: Job,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    def conflict(*args: Any, **kwargs: Any) -> Any:
        raise services.ConflictError('workloads.kueue.x-k8s.io "x" already exists')

    monkeypatch.setattr(slices, "scale_job", conflict)
    response = operator_client.post(scale_url("elastic"), {"parallelism": 5}, format="json")
    assert response.status_code == 409
    assert "already exists" in response.json()["detail"]


# --- Roles ------------------------------------------------------------------------------------


@pytest.fixture
def two_queued_jobs(make_queue: Callable[..., ClusterQueue]) -> None:
    make_queue("cq", {"cpu": "10"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "10"}, namespace="team-b")
    submit("job")
    services.submit_job(job_manifest("job", "lq-cq-b", parallelism=3), namespace="team-b")


@pytest.mark.parametrize(("role", "namespace", "want"), [
    ("anonymous", "team-a", 401),
    ("viewer", "team-a", 403),
    ("operator", "team-a", 200),
    ("operator", "team-b", 403),
    ("admin", "team-b", 200),
])
@pytest.mark.parametrize("how", ["scale", "patch"])
def test_roles(anon_client: APIClient, viewer_client: APIClient, operator_client: APIClient,
               admin_client_api: APIClient, two_queued_jobs: None, role: str, namespace: str,
               want: int, how: str) -> None:
    client = {"anonymous": anon_client, "viewer": viewer_client, "operator": operator_client,
              "admin": admin_client_api}[role]

    if how == "scale":
        response = client.post(scale_url("job", namespace), {"parallelism": 1}, format="json")
    else:
        response = patch(client, job_url("job", namespace), {"spec": {"parallelism": 1}})

    assert response.status_code == want
    job = Job.objects.get(namespace=namespace, name="job")
    assert job.manifest["spec"]["parallelism"] == (1 if want == 200 else 3)


# =========================================================================================
# PATCH .../jobs/{name}
# =========================================================================================


@pytest.mark.parametrize("content_type", [MERGE_PATCH, "application/json"])
def test_merge_patch_of_parallelism_scales(
    operator_client: APIClient, running_elastic: Job, content_type: str,
) -> None:
    response = patch(operator_client, job_url("elastic"), {"spec": {"parallelism": 6}},
                     content_type)

    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["parallelism"] == 6
    assert response.json() == operator_client.get(job_url("elastic")).json()
    assert [wl.pod_sets[0]["count"] for wl in workloads(running_elastic)] == [3, 6]


def test_patching_back_the_whole_job_read_with_a_new_parallelism(
    operator_client: APIClient, running_elastic: Job,
) -> None:
    body = operator_client.get(job_url("elastic")).json()
    body["spec"]["parallelism"] = 2

    response = patch(operator_client, job_url("elastic"), body)

    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["parallelism"] == 2
    (wl,) = workloads(running_elastic)
    assert wl.pod_sets[0]["count"] == 2


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}, "spec.template",
     "field is immutable"),
    ({"spec": {"completions": 9, "parallelism": 4}}, "spec.completions", "field is immutable"),
    ({"spec": {"backoffLimit": None}}, None, None),  # deleting an absent field changes nothing
    ({"metadata": {"labels": {"team": "x"}}}, "metadata.labels", "spec.parallelism"),
    ({"metadata": {"annotations": {jobframework.ELASTIC_JOB_ANNOTATION: None}}}, "metadata.annotations",
     "spec.parallelism"),
    ({"metadata": {"name": "other"}}, "metadata.name", "field is immutable"),
    ({"status": {"active": 9}}, "status", "read-only"),
    ({"kind": "CronJob"}, "kind", "spec.parallelism"),
    ({"spec": 3}, "spec", "must be an object"),
])
def test_patching_another_field_is_refused_naming_it(
    operator_client: APIClient, running_elastic: Job, body: dict[str, Any], field: str | None,
    message: str | None,
) -> None:
    response = patch(operator_client, job_url("elastic"), body)

    if field is None:
        assert response.status_code == 200, response.json()
        return
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert Job.objects.get(pk=running_elastic.pk).manifest == running_elastic.manifest
    assert len(workloads(running_elastic)) == 1


def test_patch_errors_of_parallelism_come_from_the_service(
    operator_client: APIClient, running_plain: Job,
) -> None:
    response = patch(operator_client, job_url("plain"), {"spec": {"parallelism": 5}})
    assert response.status_code == 400
    assert "elastic" in response.json()["spec.parallelism"][0]

    response = patch(operator_client, job_url("plain"), {"spec": {"parallelism": "5"}})
    assert response.status_code == 400
    assert list(response.json()) == ["spec.parallelism"]


def test_patch_with_a_stale_resource_version_conflicts(
    operator_client: APIClient, running_elastic: Job,
) -> None:
    read = operator_client.get(job_url("elastic")).json()
    assert patch(operator_client, job_url("elastic"), {
        "metadata": {"resourceVersion": read["metadata"]["resourceVersion"]},
        "spec": {"parallelism": 4}}).status_code == 200

    response = patch(operator_client, job_url("elastic"), {
        "metadata": {"resourceVersion": read["metadata"]["resourceVersion"]},
        "spec": {"parallelism": 2}})

    assert response.status_code == 409
    assert "has been modified" in response.json()["detail"]
    assert Job.objects.get(pk=running_elastic.pk).manifest["spec"]["parallelism"] == 4


def test_a_patch_that_changes_nothing_is_accepted_on_a_finished_job(
    operator_client: APIClient, running_plain: Job,
) -> None:
    Job.objects.filter(pk=running_plain.pk).update(status={"conditions": [
        {"type": "Complete", "status": "True", "reason": "", "message": ""}]})
    body = operator_client.get(job_url("plain")).json()

    response = patch(operator_client, job_url("plain"), body)

    assert response.status_code == 200, response.json()
    assert patch(operator_client, job_url("plain"),
                 {"spec": {"parallelism": 5}}).status_code == 400


def test_json_patch_is_not_supported(operator_client: APIClient, running_elastic: Job) -> None:
    response = operator_client.patch(
        job_url("elastic"), json.dumps([{"op": "replace", "path": "/spec/parallelism",
                                         "value": 4}]),
        content_type="application/json-patch+json")
    assert response.status_code == 415


# =========================================================================================
# The schema
# =========================================================================================


def test_the_schema_describes_scale_and_patch(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    paths = schema["paths"]

    scale = paths["/api/v1/namespaces/{namespace}/jobs/{name}/scale/"]["post"]
    assert scale["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobScaleRequest"}
    assert scale["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Job"}
    assert {"400", "403", "404", "409"} <= set(scale["responses"])
    # Either a Job's parallelism or the generic pod-set counts: neither is required alone.
    scale_request = schema["components"]["schemas"]["JobScaleRequest"]
    assert set(scale_request["properties"]) == {"parallelism", "podSets"}
    assert "required" not in scale_request
    assert set(schema["components"]["schemas"]["PodSetCountRequest"]["required"]) == {
        "name", "count"}

    job_patch = paths["/api/v1/namespaces/{namespace}/jobs/{name}/"]["patch"]
    content = job_patch["requestBody"]["content"]
    assert set(content) == {MERGE_PATCH, "application/json"}
    assert content[MERGE_PATCH]["schema"] == {"$ref": "#/components/schemas/PatchedJobPatchRequest"}
    spec = schema["components"]["schemas"]["JobSpecPatchRequest"]["properties"]
    assert set(spec) == {"parallelism"}
    assert "/api/v1/namespaces/{namespace}/jobs/{name}/scale" not in paths  # no-slash alias


def test_a_job_created_on_its_cluster_is_changed_there_not_through_kueueweb(
    operator_client: APIClient, queue: ClusterQueue,
) -> None:
    job = services.submit_job(job_manifest("kubectl", "lq-cq", parallelism=3),
                              namespace="team-a", source=JobSource.CLUSTER)

    scaled = operator_client.post(scale_url("kubectl"), {"parallelism": 5}, format="json")
    patched = patch(operator_client, job_url("kubectl"), {"spec": {"parallelism": 5}})
    read = operator_client.get(job_url("kubectl"))

    assert scaled.status_code == patched.status_code == 400
    assert scaled.json() == patched.json() == {"spec.parallelism": [
        slices.REFUSED_CREATED_ON_CLUSTER.message]}
    assert "kubectl scale" in slices.REFUSED_CREATED_ON_CLUSTER.message
    assert Job.objects.get(pk=job.pk).manifest["spec"]["parallelism"] == 3
    assert [wl.pod_sets[0]["count"] for wl in workloads(job)] == [3]
    assert read.json()["metadata"]["source"] == "cluster"
