"""TrainJob → Workload through its training runtime, and a TrainJob's run on the simulated
cluster, as Kueue's TrainJob integration and Kubeflow Trainer do it
(``scheduling.jobs.trainjob``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from multicluster.models import Cluster, Pod
from scheduling import jobframework, services
from scheduling.apps import configure_kinds
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import trainjob
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, hub  # noqa: F401  (the fixture)

JOBS = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
CLUSTER_RUNTIME = JOBS / "trainjobs-2.yaml"  # ClusterTrainingRuntime torch-distributed
SAMPLE = JOBS / "trainjobs-3.yaml"  # TrainJob pytorch-distributed naming it
NAMESPACED_RUNTIME = JOBS / "trainjobs-4.yaml"  # TrainingRuntime torch-custom in team-a
NAMESPACED_SAMPLE = JOBS / "trainjobs-5.yaml"  # TrainJob pytorch-custom naming it
ACTIVE = ("Pending", "Running")


def load(path: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    return manifest


def initializer_runtime() -> dict[str, Any]:
    """A runtime of two steps: a dataset initializer, then two trainer nodes."""
    container = {"name": "node", "image": "trainer:1",
                 "resources": {"requests": {"cpu": "1"}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "with-init"},
            "spec": {"mlPolicy": {"numNodes": 2},
                     "template": {"spec": {"replicatedJobs": [
                         {"name": "dataset-initializer", "template": {
                             "metadata": {"labels": {trainjob.ANCESTOR_LABEL:
                                                     "dataset-initializer"}},
                             "spec": {"template": {"spec": {"containers": [
                                 {"name": "dataset-initializer", "image": "init:1",
                                  "resources": {"requests": {"cpu": "500m"}}}]}}}}},
                         {"name": "node", "template": {
                             "metadata": {"labels": {trainjob.ANCESTOR_LABEL: "trainer"}},
                             "spec": {"template": {"spec": {"containers": [container]}}}}},
                     ]}}}}


@pytest.fixture(autouse=True)
def runtimes(settings: Any, tmp_path: Path) -> None:
    """The docs' runtimes and ``with-init``, as an operator lists their files."""
    extra = tmp_path / "runtimes.yaml"
    extra.write_text(yaml.safe_dump(initializer_runtime()))
    settings.KUEUEWEB = {**settings.KUEUEWEB, "TRAINING_RUNTIMES": [
        str(CLUSTER_RUNTIME), str(NAMESPACED_RUNTIME), str(extra)]}


KIND = trainjob.TrainJob()


def make_trainjob(runtime: str = "with-init", *, name: str = "tj", **spec: Any
                  ) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name,
                         "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
            "spec": {"runtimeRef": {"name": runtime}, **spec}}


# --- Runtimes ---------------------------------------------------------------------------------


def test_runtimes_come_from_the_listed_files_and_a_malformed_one_fails_startup(
    settings: Any, tmp_path: Path,
) -> None:
    assert trainjob.RUNTIMES.get("ClusterTrainingRuntime", "any", "torch-distributed")
    assert trainjob.RUNTIMES.get("TrainingRuntime", "team-a", "torch-custom")
    assert trainjob.RUNTIMES.get("TrainingRuntime", "team-b", "torch-custom") is None

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\n"
                   "metadata: {name: x}\nspec: {template: {spec: {replicatedJobs: []}}}\n")
    config = {**settings.KUEUEWEB, "TRAINING_RUNTIMES": [str(bad)]}
    with pytest.raises(ImproperlyConfigured) as raised:
        configure_kinds(config)
    assert "metadata.namespace: is required for a TrainingRuntime" in str(raised.value)
    assert "spec.template.spec.replicatedJobs: must have at least one item" in str(raised.value)
    # Nothing changed: the runtimes loaded before are still there.
    assert trainjob.RUNTIMES.get("ClusterTrainingRuntime", "", "torch-distributed")

    with pytest.raises(ImproperlyConfigured, match="missing.yaml"):
        configure_kinds({"TRAINING_RUNTIMES": [str(tmp_path / "missing.yaml")]})


# --- Pod sets ------------------------------------------------------------------------------


def test_kueue_sample_trainjob_has_its_runtimes_trainer_pod_set_with_its_overrides() -> None:
    manifest = load(SAMPLE)

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    [pod_set] = KIND.pod_sets(manifest, partial_admission=True)
    # spec.trainer.numNodes (2) over the runtime's mlPolicy.numNodes (1).
    assert (pod_set["name"], pod_set["count"]) == ("node", 2)
    [container] = pod_set["template"]["spec"]["containers"]
    assert container["image"] == "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "8Gi",
                                                   "nvidia.com/gpu": "1"}}


def test_a_namespaced_runtime_is_found_in_the_trainjobs_namespace_only() -> None:
    manifest = load(NAMESPACED_SAMPLE)

    assert KIND.validate_on_create(manifest, namespace="team-a", slices_enabled=True) == []
    [pod_set] = KIND.pod_sets(manifest, partial_admission=True)
    # The runtime's trainer container is not named "node": the Trainer leaves it as it is.
    assert (pod_set["name"], pod_set["count"]) == ("node", 1)
    [container] = pod_set["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == (
        "trainer", "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime")
    assert "resources" not in container

    manifest["metadata"]["namespace"] = "team-b"
    errors = errors_to_dict(KIND.validate_on_create(manifest, namespace="team-b",
                                                    slices_enabled=True))
    assert errors["spec.runtimeRef.name"] == [
        "TrainingRuntime 'torch-custom' not found in namespace 'team-b'"]


def test_every_replicated_job_is_a_pod_set_and_the_trainer_takes_the_overrides() -> None:
    manifest = make_trainjob(trainer={
        "image": "mine:2", "command": ["sleep", "30"], "env": [{"name": "A", "value": "1"}],
        "resourcesPerNode": {"requests": {"memory": "1Gi"}, "limits": {"cpu": "2"}}})

    init, node = KIND.pod_sets(manifest, partial_admission=False)

    assert [(init["name"], init["count"]), (node["name"], node["count"])] == [
        ("dataset-initializer", 1), ("node", 2)]
    assert init["template"]["spec"]["containers"][0]["image"] == "init:1"
    [container] = node["template"]["spec"]["containers"]
    assert container == {"name": "node", "image": "mine:2", "command": ["sleep", "30"],
                         "env": [{"name": "A", "value": "1"}],
                         "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                       "limits": {"cpu": "2"}}}
    jobset = KIND.jobset(manifest)
    assert [(rj.get("replicas"),
             rj["template"]["spec"]["parallelism"]) for rj in jobset["spec"][
        "replicatedJobs"]] == [(None, 1), (1, 2)]


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any], namespace: str = "team-a") -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace=namespace,
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    no_ref = make_trainjob()
    del no_ref["spec"]["runtimeRef"]
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_trainjob("nowhere"), "spec.runtimeRef.name",
         "ClusterTrainingRuntime 'nowhere' not found"),
        (no_ref, "spec.runtimeRef", "is required"),
        (make_trainjob(""), "spec.runtimeRef.name", "is required"),
        (make_trainjob(suspend="yes"), "spec.suspend", "must be a boolean"),
        (make_trainjob(trainer={"numNodes": 0}), "spec.trainer.numNodes",
         "greater than or equal to 1"),
        (make_trainjob(trainer={"command": "python train.py"}), "spec.trainer.command",
         "must be a list of strings"),
        (make_trainjob(trainer={"resourcesPerNode": {"requests": ["cpu"]}}),
         "spec.trainer.resourcesPerNode.requests", "must be an object"),
        (make_trainjob(runtimePatches={"manager": "me"}), "spec.runtimePatches",
         "must be a list"),
    ]
    wrong_kind = make_trainjob()
    wrong_kind["spec"]["runtimeRef"]["kind"] = "Runtime"
    cases.append((wrong_kind, "spec.runtimeRef.kind", "must be one of"))
    wrong_group = make_trainjob()
    wrong_group["spec"]["runtimeRef"]["apiGroup"] = "kubeflow.org"
    cases.append((wrong_group, "spec.runtimeRef.apiGroup", "must be trainer.kubeflow.org"))
    wrong_queue = make_trainjob()
    wrong_queue["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "Not A Queue"
    cases.append((wrong_queue, jobframework.label_path(jobframework.QUEUE_NAME_LABEL), ""))

    for manifest, field, message in cases:
        errors = _refused(manifest)
        assert field in errors, (field, errors)
        assert any(message in e for e in errors[field]), (message, errors[field])


# --- Inject, restore, status ----------------------------------------------------------------


def test_run_puts_the_admission_in_kueues_runtime_patch_and_restore_empties_it() -> None:
    own_patch = {"manager": "someone", "trainingRuntimeSpec": {}}
    manifest = make_trainjob(suspend=True, runtimePatches=[own_patch])
    infos = [jobframework.PodSetInfo(name="dataset-initializer", count=1,
                                     node_selector={"pool": "a"},
                                     labels={"kueue.x-k8s.io/podset": "dataset-initializer"}),
             jobframework.PodSetInfo(name="node", count=2, node_selector={"pool": "b"},
                                     tolerations=[{"key": "gpu", "operator": "Exists"}])]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    own, kueue = running["spec"]["runtimePatches"]
    assert own == own_patch
    assert kueue["manager"] == "kueue.x-k8s.io/manager"
    assert kueue["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] == [
        {"name": "dataset-initializer", "template": {"spec": {"template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": "dataset-initializer"}},
            "spec": {"nodeSelector": {"pool": "a"}}}}}},
        {"name": "node", "template": {"spec": {"template": {
            "metadata": {}, "spec": {"nodeSelector": {"pool": "b"},
                                     "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}}}]
    # The pod sets are the runtime's either way.
    assert KIND.pod_sets(running, partial_admission=False) == KIND.pod_sets(
        manifest, partial_admission=False)

    restored = KIND.restore_pod_sets_info(KIND.suspend(running), [])
    assert restored["spec"]["runtimePatches"] == [
        own_patch, {"manager": "kueue.x-k8s.io/manager",
                    "trainingRuntimeSpec": {"template": {"spec": {}}}}]


def test_finished_reads_the_complete_and_failed_conditions() -> None:
    assert KIND.finished({"conditions": [{"type": "Complete", "status": "True",
                                          "message": "done"}]}) == ("Succeeded", "done")
    assert KIND.finished({"conditions": [{"type": "Failed", "status": "True",
                                          "message": "oom"}]}) == ("Failed", "oom")
    assert KIND.finished({"conditions": [{"type": "Complete", "status": "False"}]}) is None


def test_pods_ready_counts_ready_and_succeeded_child_jobs_against_the_replicas() -> None:
    manifest = make_trainjob()
    half = {"jobsStatus": [{"name": "dataset-initializer", "ready": 0, "succeeded": 0},
                           {"name": "node", "ready": 1}]}
    assert not KIND.report(manifest, half, wanted=3, ready_pods=3).all_ready
    done = {"jobsStatus": [{"name": "dataset-initializer", "succeeded": 1},
                           {"name": "node", "ready": 1}]}
    report = KIND.report(manifest, done, wanted=3, ready_pods=2)
    assert report.all_ready
    # The initializer's one Job succeeded: its pod no longer needs quota.
    assert report.reclaimable_pods == {"dataset-initializer": 1}


def test_remote_copy_carries_the_pod_labels_in_kueues_patch_and_multikueue_drops_it() -> None:
    manifest = make_trainjob(managedBy="kueue.x-k8s.io/multikueue")
    infos = [jobframework.PodSetInfo(name="dataset-initializer", count=1),
             jobframework.PodSetInfo(name="node", count=2)]

    remote = KIND.remote_copy(manifest, namespace="ns", labels={"origin": "x"},
                              pod_labels={"kueue.x-k8s.io/job-uid": "u"}, infos=infos)

    assert remote["spec"]["suspend"] is False
    assert "managedBy" not in remote["spec"]
    [patch] = remote["spec"]["runtimePatches"]
    assert [rj["template"]["spec"]["template"]["metadata"]["labels"] for rj in patch[
        "trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]] == [
        {"kueue.x-k8s.io/job-uid": "u"}, {"kueue.x-k8s.io/job-uid": "u"}]
    assert remote["metadata"]["labels"]["origin"] == "x"

    copied = KIND.multikueue_copy(KIND.run_with_pod_sets_info(manifest, infos), labels={})
    assert KIND.is_suspended(copied)
    assert copied["spec"]["runtimePatches"] == []
    assert "managedBy" not in copied["spec"]


def test_trainjob_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("trainer.kubeflow.org/trainjob") is registry.by_kind(
        "trainer.kubeflow.org/v1alpha1", "TrainJob")
    # Kueue's shipped controller config enables it.
    assert "trainer.kubeflow.org/trainjob" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("trainer.kubeflow.org", "v1alpha1",
                                                       "trainjobs")


# --- Submission and the simulated cluster --------------------------------------------------


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "10", "memory": "20Gi", "nvidia.com/gpu": "2"},
                    namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


@pytest.mark.django_db
def test_kueue_sample_trainjob_is_accepted_unchanged_as_yaml(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    response = admin_client_api.generic("POST", "/api/v1/namespaces/default/jobs/",
                                        SAMPLE.read_bytes(), content_type="application/yaml")

    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == load(SAMPLE)["spec"]
    job = Job.objects.get(kind="TrainJob")
    assert (job.api_version, job.name, job.suspend) == (
        "trainer.kubeflow.org/v1alpha1", "pytorch-distributed", True)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith("trainjob-pytorch-distributed-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [("node", 2)]
    assert wl.pod_sets[0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}


@pytest.mark.django_db
def test_a_trainjob_naming_a_missing_runtime_is_refused_naming_the_field(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    response = admin_client_api.post("/api/v1/namespaces/default/jobs/",
                                     make_trainjob("nowhere"), format="json")

    assert response.status_code == 400
    assert response.json()["spec.runtimeRef.name"] == [
        "ClusterTrainingRuntime 'nowhere' not found"]
    assert not Job.objects.filter(name="tj").exists()


@pytest.mark.django_db
def test_a_trainjob_runs_its_runtimes_pods_as_a_gang_to_completion_after_an_eviction(
    user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    manifest = make_trainjob(trainer={"command": ["sleep", "30"]})
    job = services.submit_job(copy.deepcopy(manifest), namespace="default")
    wl = Workload.objects.get(job=job)

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "dataset-initializer", "node", "node"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert [(s["name"], s["ready"]) for s in job.status["jobsStatus"]] == [
        ("dataset-initializer", 1), ("node", 1)]
    assert cond.is_true(wl.conditions, "PodsReady")

    # Evicted: stopped and its quota released, requeued and admitted again, anew.
    services.evict_workload(wl, now=t0 + timedelta(seconds=6))
    reconcilers.step(t0 + timedelta(seconds=7))
    wl.refresh_from_db()
    job.refresh_from_db()
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))
    assert wl.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=job, phase__in=ACTIVE).count() == 3

    # The trainer's containers (and the initializer's, by the default run time) end.
    reconcilers.step(t0 + timedelta(seconds=200))
    reconcilers.step(t0 + timedelta(seconds=201))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "jobset completed successfully")
    assert [(s["name"], s["succeeded"]) for s in job.status["jobsStatus"]] == [
        ("dataset-initializer", 1), ("node", 1)]
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert finished["reason"] == "Succeeded"


# --- MultiKueue ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("hub")
def test_a_trainjob_runs_on_the_winner_and_finishes_on_the_hub(t0: datetime) -> None:
    from multicluster.choices import ClusterRole

    everything = Everything()
    manager = Cluster.objects.get(role=ClusterRole.MANAGER)
    Job.objects.all().delete()
    manifest = make_trainjob(trainer={"command": ["sleep", "20"],
                                      "resourcesPerNode": {"requests": {"memory": "100Mi"}}},
                             managedBy="kueue.x-k8s.io/multikueue")
    manifest["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "multikueue-queue"
    job = services.submit_job(manifest, namespace="research", cluster=manager)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("TrainJob", "tj")
    assert "managedBy" not in remote_job.manifest["spec"]
    remote_wl = Workload.objects.get(cluster=winner)
    assert [(ps["name"], ps["count"]) for ps in remote_wl.pod_sets] == [
        ("dataset-initializer", 1), ("node", 2)]
    everything.step(t0 + timedelta(seconds=3))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "dataset-initializer", "node", "node"]
    assert not Pod.objects.filter(cluster=manager).exists()

    everything.step(t0 + timedelta(seconds=6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert [s["name"] for s in job.status["jobsStatus"]] == ["dataset-initializer", "node"]

    everything.step(t0 + timedelta(seconds=40))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    job.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "jobset completed successfully")
