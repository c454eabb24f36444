"""A Deployment on a Kubernetes cluster: kueueweb keeps the Deployment and plays its
ReplicaSet controller, and what goes to the cluster is each admitted Pod on its own, ungated,
placed by its own Workload's admission. Scaling down deletes the cluster's Pods and frees
their quota; an evicted Pod is deleted there and its replacement, a new Pod with a new
Workload, goes there once admitted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import deployments, jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.models import Job, Workload
from scheduling.scheduler import admission

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-deployment.yaml")


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "deployment"]}


@pytest.fixture
def two_pods(make_user_queue_domain: Callable[[str], Cluster]) -> Cluster:
    """``user-queue`` with quota for two of the sample's Pods (100m each)."""
    return make_user_queue_domain("200m")


def step(kube_api: Any, domain: Cluster, deployment: Job, now: datetime) -> None:
    """The ReplicaSet controller, an admission cycle and a pass of the cluster; the
    cluster's kubelets then run every Pod it has, ready."""
    deployments.sync_deployment(deployment.pk, now=now)
    admission.run_admission_cycle(domain.pk, now=now)
    sync_kube_cluster(domain.pk, now=now)
    for remote in kube_api.objects("pods", kube_api.namespace):
        if (remote.get("status") or {}).get("phase") != "Running":
            kube_api.set_pod(kube_api.namespace, remote["metadata"]["name"], phase="Running",
                             ready=True)


def phases(deployment: Job) -> dict[str, str]:
    """Each of its Pods' Workload phase, by Pod name."""
    return {job.name: Workload.objects.get(job=job).phase
            for job in deployments.owned_pods(deployment)}


def on_cluster(kube_api: Any) -> set[str]:
    return {p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace)}


def started(kube_api: Any, domain: Cluster, t0: datetime) -> Job:
    """The sample submitted and stepped until its admitted Pods run, ready, on the cluster."""
    kube_api.require_fake()
    deployment = services.submit_job(yaml.safe_load(SAMPLE.read_text()),
                                     namespace=kube_api.namespace, cluster=domain)
    step(kube_api, domain, deployment, t0)
    step(kube_api, domain, deployment, t0 + timedelta(seconds=1))
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=1))
    return deployment


@pytest.mark.usefixtures("enabled")
def test_kueue_sample_deployment_runs_its_admitted_pods_on_the_cluster(
    kube_api: Any, two_pods: Cluster, t0: datetime,
) -> None:
    deployment = started(kube_api, two_pods, t0)

    status = phases(deployment)
    assert sorted(status.values()) == [WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED,
                                       WorkloadPhase.PENDING]
    admitted = {name for name, phase in status.items() if phase == WorkloadPhase.ADMITTED}
    # Only the admitted Pods go; the Deployment itself stays with kueueweb.
    assert on_cluster(kube_api) == admitted
    assert kube_api.requests_to("POST", "/apis/apps") == []
    for job in deployments.owned_pods(deployment):
        if job.name not in admitted:
            assert job.suspend
            continue
        remote = kube_api.get("pods", kube_api.namespace, job.name)
        labels = remote["metadata"]["labels"]
        assert labels[ORIGIN_LABEL] == "multikueue"
        assert labels[jobframework.JOB_UID_LABEL] == str(job.uid)
        assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == (
            Workload.objects.get(job=job).name)
        assert labels["pod-template-hash"] == job.name.split("-")[-2]
        assert "schedulingGates" not in remote["spec"]
        assert remote["spec"]["nodeSelector"] == {"instance-type": "spot"}
        assert remote["spec"]["restartPolicy"] == "Always"
        job.refresh_from_db()
        assert not job.suspend
        assert job.status["phase"] == "Running"
        assert pods.is_ready(job.status)
    deployment.refresh_from_db()
    assert {k: deployment.status[k] for k in ("replicas", "readyReplicas",
                                              "availableReplicas")} == {
        "replicas": 3, "readyReplicas": 2, "availableReplicas": 2}

    # Serving Pods do not end: an hour later the same two still run there.
    step(kube_api, two_pods, deployment, t0 + timedelta(hours=1))
    assert on_cluster(kube_api) == admitted


@pytest.mark.usefixtures("enabled")
# The reconcilers' clock is the one they are given, however far behind the wall clock: the
# freed quota is requeued on it, so the next cycle, on the same clock, sees it free.
@pytest.mark.parametrize("behind", [timedelta(0), timedelta(hours=1)], ids=["now", "behind"])
def test_scaling_down_deletes_pods_on_the_cluster_and_frees_their_quota(
    kube_api: Any, two_pods: Cluster, t0: datetime, behind: timedelta,
) -> None:
    t0 -= behind
    deployment = started(kube_api, two_pods, t0)
    before = phases(deployment)

    deployments.scale_deployment(deployment, 1)
    step(kube_api, two_pods, deployment, t0 + timedelta(seconds=2))

    after = phases(deployment)
    assert list(after.values()) == [WorkloadPhase.ADMITTED]
    assert on_cluster(kube_api) == set(after)
    gone = set(before) - set(after)
    assert len(gone) == 2
    assert not Workload.objects.filter(job__name__in=gone).exists()

    # The freed quota admits a new Pod at once, which goes to the cluster.
    deployments.scale_deployment(Job.objects.get(pk=deployment.pk), 2)
    step(kube_api, two_pods, deployment, t0 + timedelta(seconds=3))

    again = phases(deployment)
    assert list(again.values()) == [WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED]
    assert on_cluster(kube_api) == set(again)
    assert not set(again) & gone


@pytest.mark.usefixtures("enabled")
def test_an_evicted_pod_is_deleted_there_and_its_readmitted_replacement_runs_there(
    kube_api: Any, two_pods: Cluster, t0: datetime,
) -> None:
    deployment = started(kube_api, two_pods, t0)
    deployments.scale_deployment(deployment, 2)
    step(kube_api, two_pods, deployment, t0 + timedelta(seconds=2))
    victim = sorted(on_cluster(kube_api))[0]
    victim_wl = Workload.objects.get(job__name=victim)

    services.evict_workload(victim_wl, now=t0 + timedelta(seconds=3))
    stopped = sync_kube_cluster(two_pods.pk, now=t0 + timedelta(seconds=3))

    assert stopped.deleted == [f"{kube_api.namespace}/{victim}"]
    assert victim not in on_cluster(kube_api)
    victim_wl.refresh_from_db()
    assert victim_wl.phase == WorkloadPhase.FINISHED  # a stopped Pod does not run again

    # The ReplicaSet controller replaces it: a new Pod, a new Workload, admitted on the
    # quota the evicted one gave back, and run on the cluster.
    step(kube_api, two_pods, deployment, t0 + timedelta(seconds=4))

    now_running = phases(deployment)
    assert victim not in now_running
    assert not Workload.objects.filter(pk=victim_wl.pk).exists()
    assert list(now_running.values()) == [WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED]
    assert on_cluster(kube_api) == set(now_running)
    replacement = next(job for job in deployments.owned_pods(deployment)
                       if job.name in set(now_running) - {victim}
                       and Workload.objects.get(job=job).created_at > victim_wl.created_at)
    assert kube_api.get("pods", kube_api.namespace, replacement.name)["metadata"]["labels"][
        jobframework.PREBUILT_WORKLOAD_LABEL] == Workload.objects.get(job=replacement).name
