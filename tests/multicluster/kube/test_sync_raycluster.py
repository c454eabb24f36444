"""A RayCluster on a Kubernetes cluster: created through the custom objects API with each
pod set's flavor in its group's template, ready by its state, never finished, stopped on
eviction, and an elastic one's worker group scaled by a patch that keeps the templates."""

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
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import slices

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-cluster-sample.yaml")
RAYCLUSTERS = "/apis/ray.io/v1"


def workload(job: Job) -> Workload:
    return slices.ordered(Workload.objects.filter(job=job))[-1]


def admit(kube_api: Any, domain: Cluster, now: datetime, *, elastic: bool = False) -> Job:
    """The sample RayCluster, submitted and admitted on a cluster with the RayCluster CRD."""
    kube_api.require_fake()
    kube_api.install_raycluster_crd()
    manifest = yaml.safe_load(SAMPLE.read_text())
    if elastic:
        manifest["metadata"]["annotations"] = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
    job = services.submit_job(manifest, namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    assert workload(job).phase == WorkloadPhase.ADMITTED
    return job


def test_the_sample_raycluster_runs_on_the_cluster_until_evicted(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    job = admit(kube_api, user_queue_domain, t0)
    key = f"{kube_api.namespace}/{job.name}"

    started = sync_kube_cluster(user_queue_domain.pk, now=t0)

    assert started.started == [key]
    remote = kube_api.get("rayclusters", kube_api.namespace, job.name)
    assert (remote["spec"]["suspend"], remote["metadata"]["labels"][ORIGIN_LABEL]) == (
        False, "multikueue")
    templates = [remote["spec"]["headGroupSpec"]["template"],
                 remote["spec"]["workerGroupSpecs"][0]["template"]]
    for template in templates:
        assert template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    [created] = kube_api.requests_to(
        "POST", f"{RAYCLUSTERS}/namespaces/{kube_api.namespace}/rayclusters")
    assert created.body["kind"] == "RayCluster"

    kube_api.run_raycluster_controller()
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=10))
    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"
    job.refresh_from_db()
    assert job.status["state"] == "ready"

    # It never finishes: long after, the cluster still runs on its quota.
    later = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(hours=2))
    assert later.finished == []
    assert workload(job).phase == WorkloadPhase.ADMITTED

    services.evict_workload(workload(job), now=t0 + timedelta(hours=2, seconds=1))
    stopping = sync_kube_cluster(user_queue_domain.pk,
                                 now=t0 + timedelta(hours=2, seconds=2))
    assert stopping.stopping == [key]
    assert kube_api.get("rayclusters", kube_api.namespace, job.name)["spec"]["suspend"] is True

    kube_api.run_raycluster_controller()
    stopped = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(hours=2, seconds=3))
    assert stopped.stopped == [key]
    assert kube_api.get("rayclusters", kube_api.namespace, job.name) is None
    assert kube_api.objects("pods", kube_api.namespace) == []
    assert workload(job).phase == WorkloadPhase.PENDING


def test_an_elastic_raycluster_follows_its_admitted_worker_replicas(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    job = admit(kube_api, user_queue_domain, t0, elastic=True)
    sync_kube_cluster(user_queue_domain.pk, now=t0)
    path = f"{RAYCLUSTERS}/namespaces/{kube_api.namespace}/rayclusters/{job.name}"

    slices.scale_job(Job.objects.get(pk=job.pk), {"small-group": 3},
                     now=t0 + timedelta(seconds=5))
    waiting = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=5))
    assert waiting.scaled == []
    admission.run_admission_cycle(user_queue_domain.pk, now=t0 + timedelta(seconds=6))
    up = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=6))

    assert up.scaled == [f"{kube_api.namespace}/{job.name}"]
    [group] = kube_api.get("rayclusters", kube_api.namespace, job.name)["spec"][
        "workerGroupSpecs"]
    assert group["replicas"] == 3
    # The list went whole, as the cluster had it: the flavor and pod labels stay.
    assert group["template"]["spec"]["nodeSelector"] == {"instance-type": "spot"}
    assert group["template"]["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
    kube_api.run_raycluster_controller()
    assert len(kube_api.objects("pods", kube_api.namespace)) == 4

    slices.scale_job(Job.objects.get(pk=job.pk), {"small-group": 1},
                     now=t0 + timedelta(seconds=10))
    down = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=10))

    assert down.scaled == [f"{kube_api.namespace}/{job.name}"]
    assert kube_api.get("rayclusters", kube_api.namespace, job.name)["spec"][
        "workerGroupSpecs"][0]["replicas"] == 1
    patches = [r.body for r in kube_api.requests_to("PATCH", path)
               if "workerGroupSpecs" in (r.body.get("spec") or {})]
    assert [[g["replicas"] for g in p["spec"]["workerGroupSpecs"]] for p in patches] == [
        [3], [1]]
    assert all(p["metadata"]["resourceVersion"] for p in patches)
    kube_api.run_raycluster_controller()
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2
