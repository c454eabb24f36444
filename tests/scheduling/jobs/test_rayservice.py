"""RayService → Workload, and a RayService's run on the simulated cluster, as Kueue's
RayService integration and the KubeRay operator do it (``scheduling.jobs.rayservice``)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Pod
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import rayservice
from scheduling.models import Event, Job, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from scheduling.workload import slices
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, hub  # noqa: F401  (the fixture)
from tests.scheduling.jobs.test_raycluster import group, template, user_queue  # noqa: F401

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-service-sample.yaml")
KIND = rayservice.RayService()
ACTIVE = ("Pending", "Running")


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def make_service(*groups: dict[str, Any], name: str = "rs", elastic: bool = False,
                 **cluster: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name,
                                "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}}
    if elastic:
        metadata["annotations"] = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": metadata,
            "spec": {"serveConfigV2": "applications: []\n",
                     "rayClusterConfig": {"headGroupSpec": {"template": template()},
                                          "workerGroupSpecs": list(groups), **cluster}}}


# --- Pod sets ------------------------------------------------------------------------------


def test_kueue_sample_rayservice_is_valid_and_has_the_clusters_pod_sets() -> None:
    manifest = sample()

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    # minReplicas 1 / maxReplicas 5 do not count without autoscaling.
    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [("head", 1), ("small-group", 1)]
    cluster = manifest["spec"]["rayClusterConfig"]
    assert pod_sets[0]["template"] == cluster["headGroupSpec"]["template"]
    assert pod_sets[1]["template"] == cluster["workerGroupSpecs"][0]["template"]


def test_worker_pod_sets_count_replicas_times_hosts_as_a_rayclusters_do() -> None:
    manifest = make_service(group("Small"), group("multi", 3, numOfHosts=2))

    assert [(ps["name"], ps["count"]) for ps in KIND.pod_sets(
        manifest, partial_admission=True)] == [("head", 1), ("small", 1), ("multi", 6)]
    assert [(s.name, s.path, s.count) for s in KIND.scalable_pod_sets(manifest)] == [
        ("small", "spec.rayClusterConfig.workerGroupSpecs[0].replicas", 1)]


def test_the_pod_priority_class_is_read_from_the_cluster_templates() -> None:
    manifest = make_service(group("a"))
    manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"][
        "priorityClassName"] = "high"

    assert KIND.pod_priority_class(manifest) == (
        "high", "spec.rayClusterConfig.workerGroupSpecs[0].template.spec.priorityClassName")


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    base = "spec.rayClusterConfig"
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_service(group("head")), f"{base}.workerGroupSpecs[0].groupName",
         "may not be named 'head'"),
        (make_service(group("a"), group("a")), f"{base}.workerGroupSpecs[1].groupName",
         "duplicate worker group name 'a'"),
        (make_service(group("a", -1)), f"{base}.workerGroupSpecs[0].replicas",
         "greater than or equal to 0"),
        (make_service(*(group(f"g{i}") for i in range(18))), f"{base}.workerGroupSpecs",
         "at most 17 items"),
        (make_service(group("a"), enableInTreeAutoscaling=True),
         f"{base}.enableInTreeAutoscaling", "only when it is elastic"),
        (make_service(group("a"), suspend="yes"), f"{base}.suspend", "must be a boolean"),
    ]
    no_head = make_service(group("a"))
    del no_head["spec"]["rayClusterConfig"]["headGroupSpec"]
    cases.append((no_head, f"{base}.headGroupSpec", "is required"))
    no_cluster = make_service()
    del no_cluster["spec"]["rayClusterConfig"]
    cases.append((no_cluster, base, "is required"))
    bad_config = make_service(group("a"))
    bad_config["spec"]["serveConfigV2"] = {"applications": []}
    cases.append((bad_config, "spec.serveConfigV2", "must be a string"))
    wrong_queue = make_service(group("a"))
    wrong_queue["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "Not A Queue"
    cases.append((wrong_queue, jobframework.label_path(jobframework.QUEUE_NAME_LABEL), ""))

    for manifest, field, message in cases:
        errors = _refused(manifest)
        assert field in errors, (field, errors)
        assert any(message in e for e in errors[field]), (message, errors[field])


def test_autoscaling_is_accepted_for_an_elastic_service() -> None:
    assert _refused(make_service(group("a"), elastic=True, enableInTreeAutoscaling=True)) == {}


# --- Suspend, inject, restore, status --------------------------------------------------------


def test_suspend_lives_in_the_cluster_config_and_is_a_merge_patch() -> None:
    manifest = make_service(group("a"))

    assert not KIND.is_suspended(manifest)
    suspended = KIND.suspend(manifest)
    assert KIND.is_suspended(suspended)
    assert suspended["spec"]["serveConfigV2"] == manifest["spec"]["serveConfigV2"]
    assert suspended["spec"]["rayClusterConfig"]["workerGroupSpecs"] == manifest["spec"][
        "rayClusterConfig"]["workerGroupSpecs"]
    assert "suspend" not in suspended["spec"]
    assert KIND.suspend({}, False) == {"spec": {"rayClusterConfig": {"suspend": False}}}


def test_run_merges_head_then_each_worker_group_and_restore_gives_them_back() -> None:
    manifest = KIND.suspend(make_service(group("a", 2), group("b")))
    infos = [jobframework.PodSetInfo(name=name, count=count, node_selector={"flavor": name})
             for name, count in (("head", 1), ("a", 2), ("b", 1))]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    cluster = running["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"flavor": "head"}
    assert [g["template"]["spec"]["nodeSelector"] for g in cluster["workerGroupSpecs"]] == [
        {"flavor": "a"}, {"flavor": "b"}]
    restored = KIND.restore_pod_sets_info(running, KIND.pod_sets(manifest,
                                                                 partial_admission=False))
    assert restored["spec"]["rayClusterConfig"]["headGroupSpec"] == manifest["spec"][
        "rayClusterConfig"]["headGroupSpec"]
    assert restored["spec"]["rayClusterConfig"]["workerGroupSpecs"] == manifest["spec"][
        "rayClusterConfig"]["workerGroupSpecs"]


def test_a_service_never_finishes_and_is_ready_by_its_ready_condition() -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert KIND.finished(ready) is None
    manifest = make_service(group("a", 2))
    assert KIND.report(manifest, ready, wanted=3, ready_pods=1).all_ready
    not_ready = {"conditions": [{"type": "Ready", "status": "False"}]}
    assert not KIND.report(manifest, not_ready, wanted=3, ready_pods=3).all_ready


def test_remote_copy_runs_with_the_pod_labels_on_every_template() -> None:
    manifest = KIND.suspend(make_service(group("a")))
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    infos = [jobframework.PodSetInfo(name="head", count=1),
             jobframework.PodSetInfo(name="a", count=1)]

    remote = KIND.remote_copy(manifest, namespace="ns", labels={"origin": "x"},
                              pod_labels={"kueue.x-k8s.io/job-uid": "u"}, infos=infos,
                              gang_workload="wl")

    spec = remote["spec"]
    assert spec["rayClusterConfig"]["suspend"] is False
    assert "managedBy" not in spec
    assert spec["serveConfigV2"] == manifest["spec"]["serveConfigV2"]
    cluster = spec["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]
    assert [t["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] for t in templates] == ["u", "u"]
    assert [t["spec"]["workloadRef"] for t in templates] == [
        {"name": "wl", "podGroup": "head"}, {"name": "wl", "podGroup": "a"}]
    assert remote["metadata"]["labels"]["origin"] == "x"


def test_the_multikueue_copy_is_suspended_in_its_cluster_config() -> None:
    manifest = make_service(group("a"))
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    copied = KIND.multikueue_copy(manifest, labels={"origin": "x"})

    assert KIND.is_suspended(copied)
    assert "managedBy" not in copied["spec"]
    assert copied["spec"]["serveConfigV2"] == manifest["spec"]["serveConfigV2"]


def test_rayservice_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("ray.io/rayservice") is registry.by_kind("ray.io/v1",
                                                                          "RayService")
    # Kueue's shipped controller config enables it.
    assert "ray.io/rayservice" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("ray.io", "v1", "rayservices")


# --- Submission and the simulated cluster --------------------------------------------------


def _submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", SAMPLE.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]
    return Job.objects.get(kind="RayService")


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_kueue_sample_rayservice_is_accepted_unchanged_as_yaml(
    admin_client_api: APIClient,
) -> None:
    job = _submit_sample(admin_client_api)

    assert (job.api_version, job.kind, job.name, job.suspend) == (
        "ray.io/v1", "RayService", "test-rayservice", True)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith("rayservice-test-rayservice-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [("head", 1),
                                                                 ("small-group", 1)]
    cluster = sample()["spec"]["rayClusterConfig"]
    assert wl.pod_sets[0]["template"]["spec"]["containers"][0]["resources"] == cluster[
        "headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_an_invalid_rayservice_is_refused_naming_the_field(
    admin_client_api: APIClient,
) -> None:
    manifest = make_service(group("head"))

    response = admin_client_api.post("/api/v1/namespaces/default/jobs/", manifest,
                                     format="json")

    assert response.status_code == 400
    assert "spec.rayClusterConfig.workerGroupSpecs[0].groupName" in response.json()
    assert not Job.objects.filter(name="rs").exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_kueue_sample_rayservice_serves_until_evicted_then_serves_again(
    admin_client_api: APIClient, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    url = f"/api/v1/namespaces/default/workloads/{wl.name}/"

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert not KIND.is_suspended(job.manifest)
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "head", "small-group"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert rayservice.serving(job.status)
    assert job.status["activeServiceStatus"]["rayClusterStatus"]["state"] == "ready"
    assert cond.is_true(wl.conditions, "PodsReady")

    # Long after its pods' run time, the service still serves: it never finishes.
    for seconds in (100, 200, 300):
        reconcilers.step(t0 + timedelta(seconds=seconds))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=job, phase__in=ACTIVE).count() == 2

    # Evicted: stopped (its pods gone, its quota released), requeued at once and admitted
    # again within the same pass, its cluster recreated.
    pods_before = set(Pod.objects.filter(job=job, phase__in=ACTIVE).values_list("name",
                                                                                flat=True))
    services.evict_workload(wl, now=t0 + timedelta(seconds=310))
    reconcilers.step(t0 + timedelta(seconds=311))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))
    requeued = cond.find(wl.conditions, "Requeued")
    assert requeued is not None
    assert requeued["status"] == "True"
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not KIND.is_suspended(job.manifest)
    pods_after = set(Pod.objects.filter(job=job, phase__in=ACTIVE).values_list("name",
                                                                              flat=True))
    assert len(pods_after) == 2
    assert not pods_before & pods_after

    response = admin_client_api.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=410))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.suspend
    assert KIND.is_suspended(job.manifest)
    assert not Pod.objects.filter(job=job, phase__in=ACTIVE).exists()
    assert wl.phase == WorkloadPhase.PENDING
    assert not wl.admission


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_an_elastic_rayservice_scales_a_worker_group_through_a_slice(
    admin_client_api: APIClient, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    manifest = make_service(group("small", 1), elastic=True)
    job = services.submit_job(copy.deepcopy(manifest), namespace="default")
    reconcilers.step(t0)
    (first,) = slices.ordered(Workload.objects.filter(job=job))
    assert first.phase == WorkloadPhase.ADMITTED

    response = admin_client_api.post("/api/v1/namespaces/default/jobs/rs/scale/",
                                     {"podSets": [{"name": "small", "count": 3}]},
                                     format="json")

    assert response.status_code == 200, response.json()
    assert [g["replicas"] for g in response.json()["spec"]["rayClusterConfig"][
        "workerGroupSpecs"]] == [3]
    first, second = slices.ordered(Workload.objects.filter(job=job))
    assert [(ps["name"], ps["count"]) for ps in second.pod_sets] == [("head", 1),
                                                                     ("small", 3)]
    reconcilers.step(t0 + timedelta(seconds=5))
    second.refresh_from_db()
    assert second.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=job, pod_set="small", phase__in=ACTIVE).count() == 3


# --- MultiKueue ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("hub")
def test_a_rayservice_serves_on_the_winner_and_its_status_comes_back(t0: datetime) -> None:
    from multicluster.choices import ClusterRole
    from multicluster.models import Cluster as DomainCluster

    everything = Everything()
    manager = DomainCluster.objects.get(role=ClusterRole.MANAGER)
    Job.objects.all().delete()
    manifest = make_service(group("workers", 2))
    manifest["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "multikueue-queue"
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    job = services.submit_job(manifest, namespace="research", cluster=manager)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = DomainCluster.objects.get(name=wl.cluster_name)
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("RayService", "rs")
    assert "managedBy" not in remote_job.manifest["spec"]
    assert remote_job.manifest["spec"]["serveConfigV2"] == manifest["spec"]["serveConfigV2"]
    remote_wl = Workload.objects.get(cluster=winner)
    assert [(ps["name"], ps["count"]) for ps in remote_wl.pod_sets] == [("head", 1),
                                                                        ("workers", 2)]
    everything.step(t0 + timedelta(seconds=3))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "head", "workers", "workers"]
    assert not Pod.objects.filter(cluster=manager).exists()

    everything.step(t0 + timedelta(seconds=6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert rayservice.serving(job.status)

    # A service does not finish on the worker, so it does not on the hub either.
    everything.step(t0 + timedelta(seconds=120))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert Job.objects.filter(cluster=winner).exists()
