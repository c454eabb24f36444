"""RayCluster → Workload, and a RayCluster's run on the simulated cluster, as Kueue's
RayCluster integration and the KubeRay operator do it (``scheduling.jobs.raycluster``)."""

from __future__ import annotations

import copy
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
from scheduling.jobs import raycluster
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from scheduling.workload import slices
from tests.fixtures.scheduling import Reconcilers

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-cluster-sample.yaml")
KIND = raycluster.RayCluster()


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def template(cpu: str = "1") -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0",
                                     "resources": {"requests": {"cpu": cpu}}}]}}


def group(name: str, replicas: int | None = None, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"groupName": name, "template": template(), **extra}
    if replicas is not None:
        result["replicas"] = replicas
    return result


def make_cluster(*groups: dict[str, Any], name: str = "rc", elastic: bool = False,
                 **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name,
                                "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}}
    if elastic:
        metadata["annotations"] = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata,
            "spec": {"headGroupSpec": {"template": template()},
                     "workerGroupSpecs": list(groups), **spec}}


# --- Pod sets ------------------------------------------------------------------------------


def test_kueue_sample_raycluster_is_valid_and_has_a_head_and_a_worker_pod_set() -> None:
    manifest = sample()

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    # minReplicas 1 / maxReplicas 10 do not count without autoscaling.
    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [("head", 1), ("small-group", 1)]
    assert all("minCount" not in ps for ps in pod_sets)
    assert pod_sets[0]["template"] == manifest["spec"]["headGroupSpec"]["template"]
    assert pod_sets[1]["template"] == manifest["spec"]["workerGroupSpecs"][0]["template"]


def test_worker_pod_sets_count_replicas_times_hosts_and_default_to_one() -> None:
    manifest = make_cluster(group("Small"), group("multi", 3, numOfHosts=2),
                            group("idle", 0))

    assert [(ps["name"], ps["count"]) for ps in KIND.pod_sets(
        manifest, partial_admission=True)] == [("head", 1), ("small", 1), ("multi", 6),
                                               ("idle", 0)]
    # A group with several hosts per replica is not scaled by its replicas alone.
    assert [(s.name, s.path, s.count) for s in KIND.scalable_pod_sets(manifest)] == [
        ("small", "spec.workerGroupSpecs[0].replicas", 1),
        ("idle", "spec.workerGroupSpecs[2].replicas", 0)]


def test_in_tree_autoscaling_adds_the_autoscaler_container_to_the_head() -> None:
    manifest = make_cluster(group("g", 2), elastic=True, enableInTreeAutoscaling=True)

    head = KIND.pod_sets(manifest, partial_admission=True)[0]["template"]["spec"]["containers"]
    assert head[-1] == {"name": "autoscaler",
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}

    own = {"requests": {"cpu": "1", "memory": "1Gi"}}
    manifest["spec"]["autoscalerOptions"] = {"resources": own}
    head = KIND.pod_sets(manifest, partial_admission=True)[0]["template"]["spec"]["containers"]
    assert head[-1] == {"name": "autoscaler", "resources": own}


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_cluster(group("head")), "spec.workerGroupSpecs[0].groupName",
         "may not be named 'head'"),
        (make_cluster(group("a"), group("a")), "spec.workerGroupSpecs[1].groupName",
         "duplicate worker group name 'a'"),
        (make_cluster(group("Bad_Name")), "spec.workerGroupSpecs[0].groupName",
         "not a valid name"),
        (make_cluster(group("a", -1)), "spec.workerGroupSpecs[0].replicas",
         "greater than or equal to 0"),
        (make_cluster(group("a", numOfHosts=0)), "spec.workerGroupSpecs[0].numOfHosts",
         "greater than or equal to 1"),
        (make_cluster(*(group(f"g{i}") for i in range(18))), "spec.workerGroupSpecs",
         "at most 17 items"),
        (make_cluster(group("a"), enableInTreeAutoscaling=True),
         "spec.enableInTreeAutoscaling", "only when it is elastic"),
        (make_cluster(group("a"), suspend="yes"), "spec.suspend", "must be a boolean"),
    ]
    no_head = make_cluster(group("a"))
    del no_head["spec"]["headGroupSpec"]
    cases.append((no_head, "spec.headGroupSpec", "is required"))
    no_image = make_cluster(group("a"))
    del no_image["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"]
    cases.append((no_image, "spec.workerGroupSpecs[0].template.spec.containers[0].image",
                  "is required"))

    for manifest, field, message in cases:
        errors = _refused(manifest)
        assert field in errors, (field, errors)
        assert any(message in e for e in errors[field]), (message, errors[field])


def test_autoscaling_is_accepted_for_an_elastic_cluster() -> None:
    assert _refused(make_cluster(group("a"), elastic=True, enableInTreeAutoscaling=True)) == {}


# --- Inject, restore, status ----------------------------------------------------------------


def test_run_merges_head_then_each_worker_group_and_restore_gives_them_back() -> None:
    manifest = make_cluster(group("a", 2), group("b"))
    manifest["spec"]["suspend"] = True
    infos = [jobframework.PodSetInfo(name=name, count=count,
                                     node_selector={"flavor": name})
             for name, count in (("head", 1), ("a", 2), ("b", 1))]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    assert running["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {
        "flavor": "head"}
    assert [g["template"]["spec"]["nodeSelector"] for g in running["spec"][
        "workerGroupSpecs"]] == [{"flavor": "a"}, {"flavor": "b"}]
    restored = KIND.restore_pod_sets_info(running, KIND.pod_sets(manifest,
                                                                 partial_admission=False))
    assert restored["spec"]["headGroupSpec"] == manifest["spec"]["headGroupSpec"]
    assert restored["spec"]["workerGroupSpecs"] == manifest["spec"]["workerGroupSpecs"]


def test_a_cluster_never_finishes_and_is_ready_by_its_state() -> None:
    assert KIND.finished({"state": "ready", "reason": "anything"}) is None
    manifest = make_cluster(group("a", 2))
    assert KIND.report(manifest, {"state": "ready"}, wanted=3, ready_pods=1).all_ready
    assert not KIND.report(manifest, {"state": ""}, wanted=3, ready_pods=3).all_ready


def test_scale_sets_a_groups_replicas_and_gives_the_merge_patch() -> None:
    manifest = make_cluster(group("a", 2), group("b", 1), elastic=True)

    scaled = KIND.scale(manifest, {"b": 4})

    assert [g["replicas"] for g in scaled["spec"]["workerGroupSpecs"]] == [2, 4]
    assert [g["replicas"] for g in manifest["spec"]["workerGroupSpecs"]] == [2, 1]


def test_remote_copy_runs_with_the_pod_labels_on_every_template() -> None:
    manifest = make_cluster(group("a"))
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    infos = [jobframework.PodSetInfo(name="head", count=1),
             jobframework.PodSetInfo(name="a", count=1)]

    remote = KIND.remote_copy(manifest, namespace="ns", labels={"origin": "x"},
                              pod_labels={"kueue.x-k8s.io/job-uid": "u"}, infos=infos,
                              gang_workload="wl")

    spec = remote["spec"]
    assert spec["suspend"] is False
    assert "managedBy" not in spec
    templates = [spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]]
    assert [t["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] for t in templates] == ["u", "u"]
    assert [t["spec"]["workloadRef"] for t in templates] == [
        {"name": "wl", "podGroup": "head"}, {"name": "wl", "podGroup": "a"}]
    assert remote["metadata"]["labels"]["origin"] == "x"


def test_raycluster_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("ray.io/raycluster") is registry.by_kind("ray.io/v1",
                                                                          "RayCluster")
    assert "ray.io/raycluster" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("ray.io", "v1", "rayclusters")


# --- Submission and the simulated cluster --------------------------------------------------


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "6", "memory": "8G"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def _submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", SAMPLE.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]
    return Job.objects.get(kind="RayCluster")


@pytest.mark.django_db
def test_kueue_sample_raycluster_is_accepted_unchanged_as_yaml(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    job = _submit_sample(admin_client_api)

    assert (job.api_version, job.kind, job.name, job.suspend) == (
        "ray.io/v1", "RayCluster", "raycluster-complete", True)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith("raycluster-raycluster-complete-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [("head", 1),
                                                                 ("small-group", 1)]


@pytest.mark.django_db
def test_an_invalid_raycluster_is_refused_naming_the_field(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    manifest = make_cluster(group("head"))

    response = admin_client_api.post("/api/v1/namespaces/default/jobs/", manifest,
                                     format="json")

    assert response.status_code == 400
    assert "spec.workerGroupSpecs[0].groupName" in response.json()
    assert not Job.objects.filter(name="rc").exists()


@pytest.mark.django_db
def test_kueue_sample_raycluster_runs_until_deactivated_then_runs_again(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
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
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "head", "small-group"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["state"] == "ready"
    assert cond.is_true(wl.conditions, "PodsReady")

    # Long after its pods' run time, the cluster still runs: it never finishes.
    for seconds in (100, 200, 300):
        reconcilers.step(t0 + timedelta(seconds=seconds))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert KIND.finished(job.status) is None
    assert Pod.objects.filter(job=job, phase__in=("Pending", "Running")).count() == 2

    response = admin_client_api.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=310))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.suspend
    assert KIND.is_suspended(job.manifest)
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
    assert wl.phase == WorkloadPhase.PENDING
    assert not wl.admission
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))

    response = admin_client_api.patch(url, {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=320))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert Pod.objects.filter(job=job, phase__in=("Pending", "Running")).count() == 2


# --- Elastic: a worker group's replicas through workload slices -----------------------------


def _running_pods(job: Job, pod_set: str) -> int:
    return Pod.objects.filter(job=job, pod_set=pod_set,
                              phase__in=("Pending", "Running")).count()


@pytest.mark.django_db
def test_an_elastic_raycluster_scales_a_worker_group_up_by_a_slice_and_down_in_place(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    manifest = make_cluster(group("small", 1), group("big", 1), elastic=True)
    job = services.submit_job(copy.deepcopy(manifest), namespace="default")
    reconcilers.step(t0)
    (first,) = slices.ordered(Workload.objects.filter(job=job))
    assert first.phase == WorkloadPhase.ADMITTED
    url = "/api/v1/namespaces/default/jobs/rc/scale/"

    response = admin_client_api.post(url, {"podSets": [{"name": "big", "count": 3}]},
                                     format="json")

    assert response.status_code == 200, response.json()
    assert [g["replicas"] for g in response.json()["spec"]["workerGroupSpecs"]] == [1, 3]
    first, second = slices.ordered(Workload.objects.filter(job=job))
    assert second.annotations[slices.WORKLOAD_SLICE_REPLACEMENT_FOR] == f"default/{first.name}"
    assert [(ps["name"], ps["count"]) for ps in second.pod_sets] == [
        ("head", 1), ("small", 1), ("big", 3)]
    reconcilers.step(t0 + timedelta(seconds=5))
    first.refresh_from_db()
    second.refresh_from_db()
    assert cond.find(first.conditions, "Finished")["reason"] == slices.REASON_SLICE_REPLACED
    assert second.phase == WorkloadPhase.ADMITTED
    # The new slice keeps the flavors the first one was admitted on.
    assert ([a["flavors"] for a in second.admission["podSetAssignments"]]
            == [a["flavors"] for a in first.admission["podSetAssignments"]])
    assert _running_pods(job, "big") == 3

    response = admin_client_api.post(url, {"podSets": [{"name": "big", "count": 0}]},
                                     format="json")

    assert response.status_code == 200, response.json()
    assert [wl.pk for wl in slices.ordered(Workload.objects.filter(job=job))] == [
        first.pk, second.pk]
    second.refresh_from_db()
    assert [ps["count"] for ps in second.pod_sets] == [1, 1, 0]
    reconcilers.step(t0 + timedelta(seconds=10))
    assert (_running_pods(job, "head"), _running_pods(job, "small"),
            _running_pods(job, "big")) == (1, 1, 0)

