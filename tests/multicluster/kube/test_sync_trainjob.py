"""A TrainJob on a Kubernetes cluster: created through the custom objects API with the
admission in Kueue's runtime patch, ready by its child Jobs, finished by its Complete
condition, then deleted; suspended on eviction and deleted once its pods are gone."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import trainjob
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.kube_api import JOBSET_NAME, REPLICATED_JOB_NAME

pytestmark = pytest.mark.django_db

JOBS = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
CLUSTER_RUNTIME = JOBS / "trainjobs-2.yaml"
SAMPLE = JOBS / "trainjobs-3.yaml"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1"
_ACTIVE = ("Pending", "Running")


@pytest.fixture(autouse=True)
def runtimes(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "TRAINING_RUNTIMES": [str(CLUSTER_RUNTIME)]}


def _pods(kube_api: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return [p for p in kube_api.objects("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(JOBSET_NAME) == name]


def run_trainer(kube_api: Any) -> None:
    """One pass of a minimal Kubeflow Trainer (with JobSet's and the Job controller's part
    folded in): an unsuspended, unfinished TrainJob has its runtime's pods, each replicated
    job's template with Kueue's runtime patch applied; a suspended one none."""
    for obj in kube_api.objects("trainjobs"):
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if trainjob.TrainJob().finished(status):
            continue
        patches = {rj["name"]: rj["template"]["spec"]["template"]
                   for p in spec.get("runtimePatches") or ()
                   if p.get("manager") == trainjob.KUEUE_PATCH_MANAGER
                   for rj in p["trainingRuntimeSpec"]["template"]["spec"].get(
                       "replicatedJobs") or ()}
        suspended = bool(spec.get("suspend"))
        statuses = []
        for rj in trainjob.TrainJob().jobset(obj)["spec"]["replicatedJobs"]:
            template = rj["template"]["spec"]["template"]
            patch = patches.get(rj["name"], {})
            template = {"metadata": {"labels": {
                **((template.get("metadata") or {}).get("labels") or {}),
                **((patch.get("metadata") or {}).get("labels") or {})}},
                "spec": {**template["spec"], **(patch.get("spec") or {})}}
            replicas = int(rj.get("replicas", 1))
            wanted = 0 if suspended else replicas * int(rj["template"]["spec"]["parallelism"])
            active = [p for p in _pods(kube_api, namespace, name)
                      if p["metadata"]["labels"].get(REPLICATED_JOB_NAME) == rj["name"]
                      and p["status"].get("phase") in _ACTIVE]
            for pod in active[wanted:]:
                kube_api.delete("pods", namespace, pod["metadata"]["name"])
            for _ in range(wanted - len(active)):
                kube_api._create_pod(obj, template, phase="Running", ready=True,
                                     labels={JOBSET_NAME: name, REPLICATED_JOB_NAME: rj["name"]})
            running = 0 if suspended else replicas
            statuses.append({"name": rj["name"], "ready": running, "active": running,
                             "succeeded": 0, "failed": 0,
                             "suspended": replicas if suspended else 0})
        if status.get("jobsStatus") != statuses:
            def change(target: dict[str, Any], statuses: list[Any] = statuses) -> None:
                target.setdefault("status", {})["jobsStatus"] = statuses
            kube_api._update(kube_api._resource("trainjobs"), namespace, name, change)


def complete_trainjob(kube_api: Any, namespace: str, name: str) -> None:
    """What the Trainer does once its JobSet completed."""
    for pod in _pods(kube_api, namespace, name):
        kube_api.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = {"jobsStatus": [{"name": "node", "ready": 0, "active": 0,
                                         "succeeded": 1, "failed": 0, "suspended": 0}],
                         "conditions": [{"type": "Complete", "status": "True",
                                         "reason": "JobSetCompleted",
                                         "message": "jobset has completed its execution",
                                         "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    kube_api._update(kube_api._resource("trainjobs"), namespace, name, change)


def admit_sample(kube_api: Any, domain: Cluster, now: datetime) -> Job:
    kube_api.require_fake()
    kube_api.install_crd("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
    manifest = yaml.safe_load(SAMPLE.read_text())
    # The sample names namespace default, the test server's namespace is its own; and the
    # test queue has no GPUs and 10G of memory for the two nodes.
    manifest["metadata"]["namespace"] = kube_api.namespace
    manifest["spec"]["trainer"]["resourcesPerNode"]["requests"] = {"cpu": "4",
                                                                   "memory": "4Gi"}
    job = services.submit_job(manifest, namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    assert Workload.objects.get(job=job).phase == WorkloadPhase.ADMITTED
    return job


def test_the_sample_trainjob_runs_to_completion_on_the_cluster(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, user_queue_domain, t0)
    key = f"{kube_api.namespace}/{job.name}"

    assert sync_kube_cluster(user_queue_domain.pk, now=t0).started == [key]

    remote = kube_api.get("trainjobs", kube_api.namespace, job.name)
    assert remote["spec"]["suspend"] is False
    assert remote["metadata"]["labels"][ORIGIN_LABEL] == "multikueue"
    [patch] = remote["spec"]["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod_template = node["template"]["spec"]["template"]
    assert node["name"] == "node"
    assert pod_template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
    assert pod_template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    [created] = kube_api.requests_to(
        "POST", f"{TRAINJOBS}/namespaces/{kube_api.namespace}/trainjobs")
    assert created.body["kind"] == "TrainJob"

    run_trainer(kube_api)
    pods = kube_api.objects("pods", kube_api.namespace)
    assert len(pods) == 2
    assert all(p["spec"]["nodeSelector"] == {"instance-type": "spot"} for p in pods)
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=10))
    wl = Workload.objects.get(job=job)
    assert cond.is_true(wl.conditions, "PodsReady")

    complete_trainjob(kube_api, kube_api.namespace, job.name)
    finished = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=60))

    assert finished.finished == [key]
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == (
        "Succeeded", "jobset has completed its execution")
    assert kube_api.get("trainjobs", kube_api.namespace, job.name) is None


def test_an_evicted_trainjob_is_suspended_then_deleted_and_requeued(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, user_queue_domain, t0)
    key = f"{kube_api.namespace}/{job.name}"
    sync_kube_cluster(user_queue_domain.pk, now=t0)
    run_trainer(kube_api)
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=5))

    services.evict_workload(Workload.objects.get(job=job), now=t0 + timedelta(seconds=6))
    stopping = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=7))

    assert stopping.stopping == [key]
    assert kube_api.get("trainjobs", kube_api.namespace, job.name)["spec"]["suspend"] is True
    run_trainer(kube_api)
    stopped = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=8))
    assert stopped.stopped == [key]
    assert kube_api.get("trainjobs", kube_api.namespace, job.name) is None
    assert kube_api.objects("pods", kube_api.namespace) == []
    assert Workload.objects.get(job=job).phase == WorkloadPhase.PENDING
