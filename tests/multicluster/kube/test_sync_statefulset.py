"""A StatefulSet on a Kubernetes cluster: kueueweb keeps the StatefulSet, its prebuilt group
Workload and its Pod rows; what goes to the cluster is each Pod of the admitted group, by
ordinal, ungated, placed by the group's admission. Scaling to 0 deletes the cluster's Pods
and frees the quota (the Workload is held); an eviction deletes them there, and the Pods
that replace them under the same names go there once the group is admitted again."""

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
from scheduling import jobframework, services, statefulsets
from scheduling.choices import WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.jobs.statefulset import POD_INDEX_LABEL
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-statefulset.yaml")
NAMES = {f"nginx-statefulset-{i}" for i in range(3)}


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "statefulset"]}


@pytest.fixture
def three_pods(make_user_queue_domain: Callable[[str], Cluster]) -> Cluster:
    """``user-queue`` with quota for the sample's three Pods (100m each), no more."""
    return make_user_queue_domain("300m")


def on_cluster(kube_api: Any) -> set[str]:
    return {p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace)}


def serving(kube_api: Any, statefulset: Job) -> bool:
    """Its three Pods run, ready, on the cluster, and the StatefulSet counts them."""
    statefulset.refresh_from_db()
    return (on_cluster(kube_api) == NAMES
            and (statefulset.status or {}).get("readyReplicas") == 3)


def drive(kube_api: Any, domain: Cluster, statefulset: Job, start: datetime,
          until: Callable[[], bool], *, limit: int = 12) -> datetime:
    """Every second until ``until()`` (at most ``limit`` seconds): the StatefulSet's
    controller, an admission cycle, a pass of the cluster, and the cluster's kubelets
    running every Pod it has, ready."""
    now = start
    for offset in range(limit):
        if until():
            return now
        now = start + timedelta(seconds=offset)
        statefulsets.sync_statefulset(statefulset.pk, now=now)
        admission.run_admission_cycle(domain.pk, now=now)
        sync_kube_cluster(domain.pk, now=now)
        for remote in kube_api.objects("pods", kube_api.namespace):
            if (remote.get("status") or {}).get("phase") != "Running":
                kube_api.set_pod(kube_api.namespace, remote["metadata"]["name"],
                                 phase="Running", ready=True)
    statefulsets.sync_statefulset(statefulset.pk, now=now)
    assert until(), f"not reached in {limit} seconds"
    return now


def started(kube_api: Any, domain: Cluster, t0: datetime) -> tuple[Job, datetime]:
    kube_api.require_fake()
    statefulset = services.submit_job(yaml.safe_load(SAMPLE.read_text()),
                                      namespace=kube_api.namespace, cluster=domain)
    return statefulset, drive(kube_api, domain, statefulset, t0,
                              lambda: serving(kube_api, statefulset))


@pytest.mark.usefixtures("enabled")
def test_kueue_sample_statefulset_runs_its_ordinal_pods_on_the_cluster(
    kube_api: Any, three_pods: Cluster, t0: datetime,
) -> None:
    statefulset, now = started(kube_api, three_pods, t0)

    (wl,) = Workload.objects.all()
    assert wl.name.startswith("statefulset-nginx-statefulset-")
    assert wl.phase == WorkloadPhase.ADMITTED
    assert cond.is_true(wl.conditions, "PodsReady")
    # The Pods go, one per ordinal; the StatefulSet itself stays with kueueweb.
    assert on_cluster(kube_api) == NAMES
    assert kube_api.requests_to("POST", "/apis/apps") == []
    for job in statefulsets.owned_pods(statefulset):
        remote = kube_api.get("pods", kube_api.namespace, job.name)
        labels = remote["metadata"]["labels"]
        assert labels[ORIGIN_LABEL] == "multikueue"
        assert labels[jobframework.JOB_UID_LABEL] == str(job.uid)
        assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == wl.name
        assert labels[jobframework.PODSET_LABEL] == "main"
        assert labels[POD_INDEX_LABEL] == job.name.rsplit("-", 1)[1]
        assert "schedulingGates" not in remote["spec"]
        assert remote["spec"]["nodeSelector"] == {"instance-type": "spot"}
        job.refresh_from_db()
        assert not job.suspend
        assert pods.is_ready(job.status)
    statefulset.refresh_from_db()
    assert not statefulset.suspend  # it runs through its Pods
    assert statefulset.status["readyReplicas"] == 3

    # Serving: an hour later the same Pods still run there.
    later = now + timedelta(hours=1)
    statefulsets.sync_statefulset(statefulset.pk, now=later)
    admission.run_admission_cycle(three_pods.pk, now=later)
    sync_kube_cluster(three_pods.pk, now=later)
    assert on_cluster(kube_api) == NAMES
    assert {job.name: job.uid for job in statefulsets.owned_pods(statefulset)} == {
        job.name: job.uid for job in Job.objects.filter(kind="Pod")}


@pytest.mark.usefixtures("enabled")
def test_scaling_to_zero_deletes_the_pods_there_and_frees_the_quota(
    kube_api: Any, three_pods: Cluster, t0: datetime,
) -> None:
    statefulset, now = started(kube_api, three_pods, t0)

    statefulsets.scale_statefulset(statefulset, 0)
    now = drive(kube_api, three_pods, statefulset, now + timedelta(seconds=1),
                lambda: not on_cluster(kube_api) and not statefulsets.owned_pods(statefulset))

    (wl,) = Workload.objects.all()
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.admission is None
    assert cond.find(wl.conditions, "QuotaReserved")["reason"] == "OnHold"
    statefulset.refresh_from_db()
    assert statefulset.suspend

    # The quota went back: scaling up admits the group again, and its Pods go there.
    statefulsets.scale_statefulset(statefulset, 3)
    drive(kube_api, three_pods, statefulset, now + timedelta(seconds=1),
          lambda: serving(kube_api, statefulset))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert on_cluster(kube_api) == NAMES


@pytest.mark.usefixtures("enabled")
def test_an_evicted_group_is_deleted_there_and_its_pods_come_back_after_readmission(
    kube_api: Any, three_pods: Cluster, t0: datetime,
) -> None:
    statefulset, now = started(kube_api, three_pods, t0)
    (wl,) = Workload.objects.all()
    before = {p["metadata"]["name"]: p["metadata"]["uid"]
              for p in kube_api.objects("pods", kube_api.namespace)}

    services.evict_workload(wl, now=now)
    stopped = sync_kube_cluster(three_pods.pk, now=now + timedelta(seconds=1))

    assert sorted(stopped.deleted) == sorted(f"{kube_api.namespace}/{n}" for n in NAMES)
    assert on_cluster(kube_api) == set()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING  # its quota back, requeued
    assert cond.is_true(wl.conditions, jobframework.WAITING_FOR_REPLACEMENT_PODS)
    assert {job.status["phase"] for job in statefulsets.owned_pods(statefulset)} == {"Failed"}

    drive(kube_api, three_pods, statefulset, now + timedelta(seconds=2),
          lambda: serving(kube_api, statefulset))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    after = {p["metadata"]["name"]: p["metadata"]["uid"]
             for p in kube_api.objects("pods", kube_api.namespace)}
    assert set(after) == NAMES
    assert all(after[name] != before[name] for name in NAMES)  # new Pods, the same names
    assert all(job.status["phase"] == "Running"
               for job in statefulsets.owned_pods(statefulset))
