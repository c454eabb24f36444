"""Kueue's MultiKueue setup with a Kubernetes worker: ``multikueue-setup.yaml`` applies to the
hub, a kubeconfig uploaded through the clusters API makes the worker Active, and Kueue's
``sample-job.yaml`` submitted to the hub runs on that worker's API server (the test API
server, or a real cluster when KUEUEWEB_TEST_KUBECONFIG is set)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.kube import connection, sync
from multicluster.models import Cluster
from scheduling import deployments, statefulsets
from scheduling import job_reconciler as reconciler
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples"
# The training-operator kinds the test server's operator runs: plural -> replica specs field.
TRAINING_KINDS = {"mpijobs": "mpiReplicaSpecs", "pytorchjobs": "pytorchReplicaSpecs",
                  "tfjobs": "tfReplicaSpecs", "xgboostjobs": "xgbReplicaSpecs",
                  "paddlejobs": "paddleReplicaSpecs", "jaxjobs": "jaxReplicaSpecs"}


def documents(path: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((EXAMPLES / path).read_text()) if d]


def connect_worker(kube_api: Any, manager: Cluster, admin_client_api: APIClient) -> Cluster:
    """Kueue's MultiKueue setup on the hub, its worker connected to ``kube_api`` through the
    clusters API, and the worker's own queues."""
    kube_api.require_fake()
    apply_manifests(documents("examples/multikueue/multikueue-setup.yaml"),
                    cluster=manager.name)
    worker = Cluster.objects.get(name="multikueue-test-worker1")
    assert worker.connection_type == "kubernetes"
    assert not worker.kubeconfig_encrypted

    response = admin_client_api.patch(
        f"/api/v1/clusters/{worker.name}/",
        {"spec": {"connection": {"type": "kubernetes", "kubeconfig": kube_api.kubeconfig}}},
        format="json")
    assert response.status_code == 200, response.content
    shown = response.json()["spec"]["connection"]
    assert "kubeconfig" not in shown  # the kubeconfig never leaves the server
    assert shown["hasKubeconfig"] is True
    connection.probe_cluster(worker.pk, now=timezone.now().replace(microsecond=0))
    worker.refresh_from_db()
    active = cond.find(worker.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"], active["message"]) == ("True", "Active",
                                                                        "Connected")
    # The worker's own Kueue setup: its queues live in its scheduling domain.
    apply_manifests(documents("examples/admin/single-clusterqueue-setup.yaml"),
                    cluster=worker.name)
    return worker


def submit_example(manager: Cluster, admin_client_api: APIClient, path: str, *,
                   managed_by: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                   ) -> Job:
    """Kueue's example, as YAML; with ``managed_by`` (where the kind keeps its managedBy),
    managed by MultiKueue, as Kueue's webhook defaults a job of a MultiKueue queue."""
    text = (EXAMPLES / path).read_text()
    if managed_by is not None:
        manifest = yaml.safe_load(text)
        managed_by(manifest)["managedBy"] = "kueue.x-k8s.io/multikueue"
        text = yaml.safe_dump(manifest)
    response = admin_client_api.post("/api/v1/namespaces/default/jobs", data=text,
                                     content_type="application/yaml")
    assert response.status_code == 201, response.content
    return Job.objects.get(cluster=manager, name=response.json()["metadata"]["name"])


def stepper(kube_api: Any, manager: Cluster, worker: Cluster) -> Callable[[Any], None]:
    """One round of the hub, the worker and the worker's controllers at a time."""
    def step(at: Any) -> None:
        for cluster_id in (manager.pk, worker.pk):
            lifecycle.run_lifecycle(cluster_id, now=at, rng=random.Random(0))
            admission.run_admission_cycle(cluster_id, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)
        sync.sync_kube_cluster(worker.pk, now=at)
        kube_api.run_job_controller()
        if any(r.plural == "jobsets" for r in kube_api.resources):
            kube_api.run_jobset_controller()
        for plural, replica_specs in TRAINING_KINDS.items():
            if any(r.plural == plural for r in kube_api.resources):
                kube_api.run_training_operator(plural, replica_specs)
        if any(r.plural == "rayclusters" for r in kube_api.resources):
            kube_api.run_raycluster_controller()
        if any(r.plural == "rayjobs" for r in kube_api.resources):
            kube_api.run_rayjob_controller()
        sync.sync_kube_cluster(worker.pk, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)
    return step


def run_on_worker(kube_api: Any, manager: Cluster, admin_client_api: APIClient, path: str,
                  plural: str, *, pods: int = 2, managed: bool = False,
                  where: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                  ) -> tuple[Job, Workload, Callable[[Any], None], Any]:
    """An example of ``pods`` pods submitted to the hub (``managed``: managed by MultiKueue),
    run for a few rounds: admitted and PodsReady on the hub, its copy running on the
    worker, unmanaged there. ``where`` gives the part of the object that holds the kind's
    ``suspend`` and ``managedBy`` (default: the spec)."""
    where = where or spec_of
    worker = connect_worker(kube_api, manager, admin_client_api)
    job = submit_example(manager, admin_client_api, path, managed_by=where if managed else None)
    step = stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)
    for second in range(4):
        step(now + timedelta(seconds=second))
    hub = Workload.objects.get(job=job)
    assert (hub.cluster_name, hub.phase) == (worker.name, WorkloadPhase.ADMITTED)
    assert cond.is_true(hub.conditions, "PodsReady")
    remote = kube_api.get(plural, "default", job.name)
    assert remote is not None
    assert where(remote)["suspend"] is False
    # Kueue's adapter clears managedBy on the copy; the hub's object keeps it.
    assert "managedBy" not in where(remote)
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] == hub.name
    assert len(kube_api.objects("pods", "default")) == pods
    job.refresh_from_db()
    if managed:
        assert where(job.manifest)["managedBy"] == "kueue.x-k8s.io/multikueue"
    return job, hub, step, now


def finished_on_hub(step: Callable[[Any], None], now: Any, hub: Workload) -> tuple[str, str]:
    """A few more rounds once the worker's job ended: the hub workload's Finished reason and
    message."""
    for second in range(4, 8):
        step(now + timedelta(seconds=second))
    hub.refresh_from_db()
    assert hub.phase == WorkloadPhase.FINISHED
    finished = cond.find(hub.conditions, "Finished")
    assert finished is not None
    return finished["reason"], finished["message"]


def test_sample_job_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    worker = connect_worker(kube_api, manager, admin_client_api)
    job = submit_example(manager, admin_client_api, "jobs/sample-job.yaml")
    step = stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)

    for second in range(4):
        step(now + timedelta(seconds=second))
    hub = Workload.objects.get(job=job)
    assert hub.cluster_name == worker.name
    assert hub.phase == WorkloadPhase.ADMITTED
    (state,) = hub.admission_check_states
    assert (state["name"], state["state"]) == ("sample-multikueue", "Ready")
    remote_job = kube_api.get("jobs", "default", job.name)
    assert remote_job is not None
    assert remote_job["spec"]["parallelism"] == 3
    assert remote_job["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert len(kube_api.objects("pods", "default")) == 3

    kube_api.complete_job("default", job.name)
    for second in range(4, 8):
        step(now + timedelta(seconds=second))
    hub.refresh_from_db()
    assert hub.phase == WorkloadPhase.FINISHED
    finished = cond.find(hub.conditions, "Finished")
    assert finished is not None
    assert finished["status"] == "True"
    job.refresh_from_db()
    assert any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in job.status.get("conditions", ()))


def test_sample_jobset_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    kube_api.require_fake()
    kube_api.install_jobset_crd()
    job, hub, step, now = run_on_worker(kube_api, manager, admin_client_api,
                                        "jobs/sample-jobset.yaml", "jobsets")

    kube_api.complete_jobset("default", job.name)

    assert finished_on_hub(step, now, hub) == ("Succeeded", "jobset completed successfully")
    assert kube_api.get("jobsets", "default", job.name) is None


def test_sample_mpijob_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    kube_api.require_fake()
    kube_api.install_crd("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
    worker = connect_worker(kube_api, manager, admin_client_api)
    job = submit_example(manager, admin_client_api, "jobs/sample-mpijob.yaml")
    step = stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)

    for second in range(4):
        step(now + timedelta(seconds=second))

    hub = Workload.objects.get(job=job)
    assert (hub.cluster_name, hub.phase) == (worker.name, WorkloadPhase.ADMITTED)
    assert cond.is_true(hub.conditions, "PodsReady")
    remote = kube_api.get("mpijobs", "default", job.name)
    assert remote is not None
    assert remote["spec"]["runPolicy"]["suspend"] is False
    assert "managedBy" not in remote["spec"]["runPolicy"]
    assert len(kube_api.objects("pods", "default")) == 3

    kube_api.complete_training_job("mpijobs", "default", job.name)
    for second in range(4, 8):
        step(now + timedelta(seconds=second))

    hub.refresh_from_db()
    assert hub.phase == WorkloadPhase.FINISHED
    finished = cond.find(hub.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == (
        "Succeeded", "MPIJob pi is successfully completed.")
    job.refresh_from_db()
    assert any(c.get("type") == "Succeeded" and c.get("status") == "True"
               for c in job.status.get("conditions", ()))
    assert kube_api.get("mpijobs", "default", job.name) is None


def test_sample_raycluster_on_the_hub_runs_on_a_kubernetes_worker_until_deactivated(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    kube_api.require_fake()
    kube_api.install_raycluster_crd()
    job, hub, step, now = run_on_worker(kube_api, manager, admin_client_api,
                                        "jobs/ray-cluster-sample.yaml", "rayclusters",
                                        managed=True)
    assert job.status["state"] == "ready"  # the worker's status, copied back

    # A cluster never finishes: it holds the quota until its workload is deactivated.
    for second in range(4, 8):
        step(now + timedelta(seconds=second))
    hub.refresh_from_db()
    assert hub.phase == WorkloadPhase.ADMITTED
    response = admin_client_api.patch(f"/api/v1/namespaces/default/workloads/{hub.name}/",
                                      {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.content
    for second in range(8, 12):
        step(now + timedelta(seconds=second))

    # The hub evicts it and the worker's copy goes with its pods.
    hub.refresh_from_db()
    evicted = cond.find(hub.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"]) == ("True", "Deactivated")
    assert kube_api.get("rayclusters", "default", job.name) is None
    assert kube_api.objects("pods", "default") == []


def run_policy(manifest: dict[str, Any]) -> dict[str, Any]:
    policy: dict[str, Any] = manifest["spec"].setdefault("runPolicy", {})
    return policy


def spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]
    return spec


@pytest.mark.parametrize(("path", "plural", "kind", "pods"), [
    ("jobs/sample-pytorchjob.yaml", "pytorchjobs", "PyTorchJob", 2),
    ("jobs/sample-tfjob.yaml", "tfjobs", "TFJob", 3),
    ("jobs/sample-xgboostjob.yaml", "xgboostjobs", "XGBoostJob", 3),
    ("jobs/sample-paddlejob.yaml", "paddlejobs", "PaddleJob", 2),
    ("jobs/sample-jaxjob.yaml", "jaxjobs", "JAXJob", 2),
])
def test_sample_kubeflow_job_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient, settings: Any,
    path: str, plural: str, kind: str, pods: int,
) -> None:
    kube_api.require_fake()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], f"kubeflow.org/{kind.lower()}"]}
    kube_api.install_crd("kubeflow.org", "v1", plural, kind)
    job, hub, step, now = run_on_worker(kube_api, manager, admin_client_api, path, plural,
                                        pods=pods, managed=True, where=run_policy)
    assert job.status["conditions"][0]["type"] == "Running"  # copied back from the worker

    kube_api.complete_training_job(plural, "default", job.name)

    message = f"{kind} {job.name} is successfully completed."
    assert finished_on_hub(step, now, hub) == ("Succeeded", message)
    job.refresh_from_db()
    assert reconciler.integration_of(job).finished(job.status) == ("Succeeded", message)
    assert kube_api.get(plural, "default", job.name) is None


def test_sample_rayjob_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    kube_api.require_fake()
    kube_api.install_rayjob_crd()
    # Head, one worker and the submitter.
    job, hub, step, now = run_on_worker(kube_api, manager, admin_client_api,
                                        "jobs/ray-job-sample.yaml", "rayjobs", pods=3,
                                        managed=True)
    assert (job.status["jobDeploymentStatus"], job.status["rayClusterStatus"]) == (
        "Running", {"state": "ready"})  # the worker's status, copied back

    kube_api.complete_rayjob("default", job.name)

    assert finished_on_hub(step, now, hub) == ("Succeeded", "the Ray job succeeded")
    job.refresh_from_db()
    assert job.status["jobStatus"] == "SUCCEEDED"
    assert kube_api.get("rayjobs", "default", job.name) is None


# --- serving kinds ---------------------------------------------------------------------------


def serving_stepper(kube_api: Any, manager: Cluster, worker: Cluster) -> Callable[[Any], None]:
    """``stepper`` with the Deployment and StatefulSet controllers of every domain, and the
    worker's kubelets running each Pod there, ready."""
    step = stepper(kube_api, manager, worker)

    def serving_step(at: Any) -> None:
        deployments.sync_all(now=at)
        statefulsets.sync_all(now=at)
        step(at)
        for pod in kube_api.objects("pods", "default"):
            if (pod.get("status") or {}).get("phase") != "Running":
                kube_api.set_pod("default", pod["metadata"]["name"], phase="Running",
                                 ready=True)
    return serving_step


@pytest.fixture
def serving_enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "deployment", "statefulset"]}


def serve_on_worker(kube_api: Any, manager: Cluster, admin_client_api: APIClient,
                    example: str, seconds: int) -> tuple[Job, Cluster, Any]:
    """Kueue's serving example submitted to the hub and stepped for ``seconds``: the
    object, the worker, and when it was submitted."""
    worker = connect_worker(kube_api, manager, admin_client_api)
    job = submit_example(manager, admin_client_api, f"serving-workloads/{example}")
    step = serving_stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)
    for second in range(seconds):
        step(now + timedelta(seconds=second))
    return job, worker, now


@pytest.mark.usefixtures("serving_enabled")
def test_sample_deployment_on_the_hub_runs_each_pod_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    deployment, worker, _ = serve_on_worker(kube_api, manager, admin_client_api,
                                            "sample-deployment.yaml", 5)

    hub_pods = deployments.owned_pods(deployment)
    assert len(hub_pods) == 3
    on_worker = {p["metadata"]["name"]: p for p in kube_api.objects("pods", "default")}
    assert set(on_worker) == {job.name for job in hub_pods}
    for job in hub_pods:
        # Each Pod has its own Workload, dispatched on its own.
        hub = Workload.objects.get(job=job)
        assert (hub.cluster_name, hub.phase) == (worker.name, WorkloadPhase.ADMITTED)
        labels = on_worker[job.name]["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == hub.name
        assert "schedulingGates" not in on_worker[job.name]["spec"]
        job.refresh_from_db()
        assert job.status["phase"] == "Running"
        assert reconciler.integration_of(job).is_suspended(job.manifest)  # gated on the hub
    assert kube_api.requests_to("POST", "/apis/apps") == []


@pytest.mark.usefixtures("serving_enabled")
def test_sample_statefulset_on_the_hub_runs_its_pods_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    statefulset, worker, now = serve_on_worker(kube_api, manager, admin_client_api,
                                               "sample-statefulset.yaml", 8)

    hub = Workload.objects.get(job=statefulset)
    assert (hub.cluster_name, hub.phase) == (worker.name, WorkloadPhase.ADMITTED)
    # The worker's domain keeps the StatefulSet's copy; its Pods, by ordinal, run on the
    # worker's API server as members of the hub's Workload.
    remote = Job.objects.get(cluster=worker, kind="StatefulSet")
    assert remote.manifest["metadata"]["annotations"][
        "kueue.x-k8s.io/multikueue-origin-uid"] == str(statefulset.uid)
    on_worker = {p["metadata"]["name"]: p for p in kube_api.objects("pods", "default")}
    assert set(on_worker) == {f"nginx-statefulset-{i}" for i in range(3)}
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"]
            for p in on_worker.values()} == {hub.name}
    statefulsets.sync_statefulset(remote.pk, now=now + timedelta(seconds=8))
    remote.refresh_from_db()
    assert remote.status["readyReplicas"] == 3
    # The hub's Pods stay gated.
    assert all(job.suspend for job in statefulsets.owned_pods(statefulset))
