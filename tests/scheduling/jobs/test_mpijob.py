"""MPIJob → Workload, and its run on the simulated cluster, as Kueue's MPIJob integration and
the MPI operator do it (``scheduling.jobs.mpijob``)."""

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
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import mpijob
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-mpijob.yaml")
KIND = mpijob.MPIJob()


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_kueue_sample_is_valid_with_a_launcher_then_workers() -> None:
    manifest = sample()

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [("launcher", 1), ("worker", 2)]
    assert pod_sets[1]["template"] == manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert all("minCount" not in ps for ps in pod_sets)


def test_refusals_name_their_fields() -> None:
    no_launcher = sample()
    del no_launcher["spec"]["mpiReplicaSpecs"]["Launcher"]
    two_launchers = sample()
    two_launchers["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    unknown = sample()
    unknown["spec"]["mpiReplicaSpecs"]["Master"] = unknown["spec"]["mpiReplicaSpecs"]["Worker"]
    managed = sample()
    managed["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/training-operator"
    old_version = {**sample(), "apiVersion": "kubeflow.org/v1"}
    cases = [
        (no_launcher, "spec.mpiReplicaSpecs.Launcher", "is required"),
        (two_launchers, "spec.mpiReplicaSpecs.Launcher.replicas", "must be 1"),
        (unknown, "spec.mpiReplicaSpecs.Master", "not a replica type of a MPIJob"),
        (managed, "spec.runPolicy.managedBy", "'kubeflow.org/mpi-operator'"),
        (old_version, "apiVersion", "kubeflow.org/v2beta1"),
    ]
    for manifest, path, message in cases:
        errors = _refused(manifest)
        assert path in errors, (path, errors)
        assert any(message in text for text in errors[path]), (path, errors[path])


def test_suspend_and_priority_class_live_in_the_run_policy() -> None:
    manifest = sample()
    assert not KIND.is_suspended(manifest)
    suspended = KIND.suspend(manifest)
    assert suspended["spec"]["runPolicy"] == {**manifest["spec"]["runPolicy"], "suspend": True}

    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"][
        "priorityClassName"] = "workers"
    assert KIND.pod_priority_class(manifest) == (
        "workers", "spec.mpiReplicaSpecs.Worker.template.spec.priorityClassName")
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
        "priorityClassName"] = "launcher"
    assert KIND.pod_priority_class(manifest) == (
        "launcher", "spec.mpiReplicaSpecs.Launcher.template.spec.priorityClassName")


def test_remote_and_multikueue_copies_clear_run_policy_managed_by() -> None:
    manifest = KIND.suspend(sample())
    manifest["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    copied = KIND.multikueue_copy(manifest, labels={"origin": "hub"})
    remote = KIND.remote_copy(manifest, namespace="a", labels={}, pod_labels={"p": "q"},
                              infos=[jobframework.PodSetInfo("launcher", 1),
                                     jobframework.PodSetInfo("worker", 2)])

    assert "managedBy" not in copied["spec"]["runPolicy"]
    assert copied["spec"]["runPolicy"]["suspend"] is True
    assert "managedBy" not in remote["spec"]["runPolicy"]
    assert remote["spec"]["runPolicy"]["suspend"] is False
    assert remote["apiVersion"] == "kubeflow.org/v2beta1"


def test_mpijob_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("kubeflow.org/mpijob") is registry.by_kind(
        "kubeflow.org/v2beta1", "MPIJob")
    assert "kubeflow.org/mpijob" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "4", "memory": "4Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


@pytest.mark.django_db
def test_kueue_sample_mpijob_is_accepted_unchanged_as_yaml(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    response = admin_client_api.generic("POST", "/api/v1/namespaces/default/jobs/",
                                        SAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]

    job = Job.objects.get(kind="MPIJob")
    assert (job.api_version, job.name, job.suspend) == ("kubeflow.org/v2beta1", "pi", True)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith("mpijob-pi-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [("launcher", 1), ("worker", 2)]


@pytest.mark.django_db
def test_the_launcher_decides_on_the_simulated_cluster_and_eviction_suspends(
    admin_client_api: APIClient, manager: Cluster, user_queue: ClusterQueue,
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    from scheduling import services

    manifest = copy.deepcopy(sample())
    specs = manifest["spec"]["mpiReplicaSpecs"]
    specs["Launcher"]["template"]["metadata"] = {
        "annotations": {"kueueweb.io/run-seconds": "30"}}
    # The workers run sshd until the launcher is done.
    specs["Worker"]["template"]["metadata"] = {
        "annotations": {"kueueweb.io/run-seconds": "9999"}}
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)
    url = f"/api/v1/namespaces/default/workloads/{wl.name}/"

    reconcilers.step(t0)
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "launcher", "worker", "worker"]
    response = admin_client_api.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.is_suspended(job.manifest)
    assert not Pod.objects.filter(job=job).exists()
    assert wl.phase == WorkloadPhase.PENDING

    response = admin_client_api.patch(url, {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))
    reconcilers.step(t0 + timedelta(seconds=15))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")

    reconcilers.step(t0 + timedelta(seconds=50))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "MPIJob pi is successfully completed.")
    assert wl.phase == WorkloadPhase.FINISHED
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
