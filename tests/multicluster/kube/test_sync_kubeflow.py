"""Kubeflow training jobs on a Kubernetes cluster: Kueue's PyTorchJob example is created through
the custom objects API unsuspended by ``spec.runPolicy.suspend`` with each replica's placement,
followed to PodsReady (the operator's ``Running`` condition) and Finished, and suspended the
same way on eviction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Job, LocalQueue, ResourceFlavor, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-pytorchjob.yaml")
PYTORCHJOBS = "/apis/kubeflow.org/v1"


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster, settings: Any,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "kubeflow.org/pytorchjob"]}
    cq = make_queue("cq", {"cpu": "10", "memory": "4Gi"}, flavor="spot",
                    namespace=kube_api.namespace, cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"})
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="user-queue", cluster_queue=cq)
    return kube_cluster


def workload(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def admit_sample(kube_api: Any, domain: Cluster, now: datetime) -> Job:
    kube_api.require_fake()
    kube_api.install_crd("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    manifest = yaml.safe_load(SAMPLE.read_text())
    del manifest["metadata"]["namespace"]  # the example's "default": the test's namespace
    job = services.submit_job(manifest, namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    assert workload(job).phase == WorkloadPhase.ADMITTED
    return job


def operator(kube_api: Any) -> None:
    kube_api.run_training_operator("pytorchjobs", "pytorchReplicaSpecs")


def test_the_sample_pytorchjob_runs_to_completion_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, domain, t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get("pytorchjobs", kube_api.namespace, job.name)
    assert remote is not None
    assert (remote["spec"]["runPolicy"]["suspend"],
            remote["metadata"]["labels"][ORIGIN_LABEL]) == (False, "multikueue")
    assert "suspend" not in remote["spec"]
    for rtype, replica in remote["spec"]["pytorchReplicaSpecs"].items():
        template = replica["template"]
        assert template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert template["metadata"]["labels"][jobframework.PODSET_LABEL] == rtype.lower()
        assert template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    [created] = kube_api.requests_to(
        "POST", f"{PYTORCHJOBS}/namespaces/{kube_api.namespace}/pytorchjobs")
    assert created.body["kind"] == "PyTorchJob"

    operator(kube_api)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2

    kube_api.complete_training_job("pytorchjobs", kube_api.namespace, job.name)
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=60))

    assert finished.finished == [f"{kube_api.namespace}/{job.name}"]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == (
        "Succeeded", f"PyTorchJob {job.name} is successfully completed.")
    assert kube_api.get("pytorchjobs", kube_api.namespace, job.name) is None


def test_an_evicted_pytorchjob_is_suspended_by_its_run_policy_then_runs_again(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    operator(kube_api)
    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))

    stopping = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    assert stopping.stopping == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get("pytorchjobs", kube_api.namespace, job.name)
    assert remote["spec"]["runPolicy"]["suspend"] is True
    assert "suspend" not in remote["spec"]
    assert workload(job).phase == WorkloadPhase.ADMITTED

    operator(kube_api)
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))

    assert stopped.stopped == [f"{kube_api.namespace}/{job.name}"]
    assert kube_api.get("pytorchjobs", kube_api.namespace, job.name) is None
    assert workload(job).phase == WorkloadPhase.PENDING

    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=13))
    again = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=13))
    assert again.started == [f"{kube_api.namespace}/{job.name}"]
