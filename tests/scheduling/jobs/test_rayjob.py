"""RayJob → Workload, and a RayJob's run on the simulated cluster, as Kueue's RayJob
integration and the KubeRay operator do it (``scheduling.jobs.rayjob``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Cluster, Pod
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import rayjob
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from scheduling.workload import slices
from tests.fixtures.scheduling import Reconcilers

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-job-sample.yaml")
KIND = rayjob.RayJob()


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def template(cpu: str = "1", run: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ray", "image": "rayproject/ray:2.9.0",
                                 "resources": {"requests": {"cpu": cpu}}}
    if run:
        container["command"] = ["sleep", run]
    return {"spec": {"containers": [container]}}


def make_rayjob(*groups: dict[str, Any], name: str = "rj", elastic: bool = False,
                **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name,
                                "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}}
    if elastic:
        metadata["annotations"] = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata,
            "spec": {"entrypoint": "python run.py", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": {"headGroupSpec": {"template": template()},
                                        "workerGroupSpecs": list(groups)}, **spec}}


def group(name: str, replicas: int = 1) -> dict[str, Any]:
    return {"groupName": name, "replicas": replicas, "template": template()}


# --- Pod sets ------------------------------------------------------------------------------


def test_kueue_sample_rayjob_has_head_worker_and_submitter_pod_sets() -> None:
    manifest = sample()

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [
        ("head", 1), ("small-group", 1), ("submitter", 1)]
    cluster = manifest["spec"]["rayClusterSpec"]
    assert pod_sets[0]["template"] == cluster["headGroupSpec"]["template"]
    # KubeRay's default submitter: the head's image, 500m/200Mi, never restarted.
    assert pod_sets[2]["template"] == {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": "rayproject/ray:2.9.0",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                      "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


def test_the_submission_mode_decides_the_submitter() -> None:
    own = {"spec": {"containers": [{"name": "s", "image": "busybox"}]}}
    with_template = make_rayjob(group("g"), submitterPodTemplate=own)
    assert KIND.pod_sets(with_template, partial_admission=True)[-1] == {
        "name": "submitter", "count": 1, "template": own}

    sidecar = KIND.pod_sets(make_rayjob(group("g"), submissionMode="SidecarMode"),
                            partial_admission=True)
    assert [ps["name"] for ps in sidecar] == ["head", "g"]
    assert [c["name"] for c in sidecar[0]["template"]["spec"]["containers"]] == [
        "ray", "ray-job-submitter"]

    for mode in ("HTTPMode", "InteractiveMode"):
        pod_sets = KIND.pod_sets(make_rayjob(group("g"), submissionMode=mode),
                                 partial_admission=True)
        assert [ps["name"] for ps in pod_sets] == ["head", "g"]
        assert len(pod_sets[0]["template"]["spec"]["containers"]) == 1


# --- Validation ----------------------------------------------------------------------------


def test_refusals_name_their_fields() -> None:
    no_cluster = make_rayjob()
    del no_cluster["spec"]["rayClusterSpec"]
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_rayjob(group("g"), clusterSelector={"ray.io/cluster": "shared"}),
         "spec.clusterSelector", "should not use an existing cluster"),
        (no_cluster, "spec.rayClusterSpec", "is required"),
        (make_rayjob(group("g"), shutdownAfterJobFinishes=False),
         "spec.shutdownAfterJobFinishes", "should delete the cluster after finishing"),
        (make_rayjob(group("g"), submissionMode="Batch"), "spec.submissionMode",
         "must be one of"),
        (make_rayjob(group("head")), "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
         "may not be named 'head'"),
        (make_rayjob(group("g", -1)), "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
         "greater than or equal to 0"),
        (make_rayjob(group("g"), submitterPodTemplate={"spec": {"containers": [
            {"name": "s"}]}}), "spec.submitterPodTemplate.spec.containers[0].image",
         "is required"),
    ]
    for manifest, field, message in cases:
        errors = errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                        slices_enabled=True))
        assert field in errors, (field, errors)
        assert any(message in e for e in errors[field]), (message, errors[field])


# --- Inject, restore, status ----------------------------------------------------------------


def test_run_writes_the_submitters_info_into_its_template_and_restore_gives_it_back() -> None:
    manifest = make_rayjob(group("g", 2), suspend=True)
    infos = [jobframework.PodSetInfo(name=name, count=count, node_selector={"flavor": name})
             for name, count in (("head", 1), ("g", 2), ("submitter", 1))]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    cluster = running["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"flavor": "head"}
    assert cluster["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {
        "flavor": "g"}
    submitter = running["spec"]["submitterPodTemplate"]
    assert submitter["spec"]["nodeSelector"] == {"flavor": "submitter"}
    assert submitter["spec"]["containers"][0]["name"] == "ray-job-submitter"

    restored = KIND.restore_pod_sets_info(running, KIND.pod_sets(manifest,
                                                                 partial_admission=False))
    assert restored["spec"]["rayClusterSpec"] == manifest["spec"]["rayClusterSpec"]
    assert "nodeSelector" not in restored["spec"]["submitterPodTemplate"]["spec"]


def test_finished_reads_the_job_deployment_status() -> None:
    assert KIND.finished({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}) is None
    assert KIND.finished({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                          "message": "done"}) == ("Succeeded", "done")
    assert KIND.finished({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                          "message": "boom"}) == ("Failed", "boom")
    manifest = make_rayjob(group("g"))
    ready = {"rayClusterStatus": {"state": "ready"}}
    assert KIND.report(manifest, ready, wanted=3, ready_pods=0).all_ready
    assert not KIND.report(manifest, {}, wanted=3, ready_pods=3).all_ready


def test_rayjob_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("ray.io/rayjob") is registry.by_kind("ray.io/v1", "RayJob")
    assert "ray.io/rayjob" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("ray.io", "v1", "rayjobs")


# --- Submission and the simulated cluster --------------------------------------------------


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "6", "memory": "8Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def _submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", SAMPLE.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]
    return Job.objects.get(kind="RayJob")


@pytest.mark.django_db
def test_kueue_sample_rayjob_runs_to_completion_on_the_simulated_cluster(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith("rayjob-rayjob-sample-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [
        ("head", 1), ("small-group", 1), ("submitter", 1)]

    reconcilers.step(t0)
    job.refresh_from_db()
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "head", "small-group"]

    # The cluster is ready: the submitter starts.
    reconcilers.step(t0 + timedelta(seconds=5))
    reconcilers.step(t0 + timedelta(seconds=6))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["rayClusterStatus"]["state"] == "ready"
    assert job.status["jobDeploymentStatus"] == "Running"
    assert cond.is_true(wl.conditions, "PodsReady")
    assert Pod.objects.filter(job=job, pod_set="submitter").count() == 1

    # The submitter's run (the simulation's default) ends the Ray job; the cluster goes.
    for seconds in (70, 71, 72):
        reconcilers.step(t0 + timedelta(seconds=seconds))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert (job.status["jobDeploymentStatus"], job.status["jobStatus"]) == (
        "Complete", "SUCCEEDED")
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Succeeded"
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
    reasons = set(Event.objects.filter(workload=wl, object_kind="RayJob")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


@pytest.mark.django_db
def test_a_failed_submitter_fails_the_rayjob(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = services.submit_job(make_rayjob(group("g")), namespace="default")
    wl = Workload.objects.get(job=job)
    for seconds in (0, 5, 6):
        reconcilers.step(t0 + timedelta(seconds=seconds))
    assert Pod.objects.filter(job=job, pod_set="submitter").count() == 1

    Pod.objects.filter(job=job, pod_set="submitter").update(fail=True)
    for seconds in (8, 9):
        reconcilers.step(t0 + timedelta(seconds=seconds))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == ("Failed", "the submitter pod failed")
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"


@pytest.mark.django_db
def test_deactivated_rayjob_is_suspended_and_releases_quota_then_runs_again(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    url = f"/api/v1/namespaces/default/workloads/{wl.name}/"
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == 2

    response = admin_client_api.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.suspend
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
    assert wl.phase == WorkloadPhase.PENDING
    assert not wl.admission

    response = admin_client_api.patch(url, {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=20))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert Pod.objects.filter(job=job, phase__in=("Pending", "Running")).count() == 2


@pytest.mark.django_db
def test_an_elastic_rayjob_scales_a_worker_group_up_by_a_slice_and_down_in_place(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = services.submit_job(make_rayjob(group("g", 1), elastic=True), namespace="default")
    reconcilers.step(t0)
    url = "/api/v1/namespaces/default/jobs/rj/scale/"

    response = admin_client_api.post(url, {"podSets": [{"name": "g", "count": 3}]},
                                     format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 3
    first, second = slices.ordered(Workload.objects.filter(job=job))
    assert [(ps["name"], ps["count"]) for ps in second.pod_sets] == [
        ("head", 1), ("g", 3), ("submitter", 1)]
    reconcilers.step(t0 + timedelta(seconds=5))
    second.refresh_from_db()
    assert second.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=job, pod_set="g", phase__in=("Pending", "Running")
                              ).count() == 3

    response = admin_client_api.post(url, {"podSets": [{"name": "g", "count": 1}]},
                                     format="json")
    assert response.status_code == 200, response.json()
    assert len(slices.ordered(Workload.objects.filter(job=job))) == 2
    reconcilers.step(t0 + timedelta(seconds=10))
    assert Pod.objects.filter(job=job, pod_set="g", phase__in=("Pending", "Running")
                              ).count() == 1
