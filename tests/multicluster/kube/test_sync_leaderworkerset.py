"""A LeaderWorkerSet on a Kubernetes cluster, with Kueue's sample
(``serving-workloads/sample-leaderworkerset.yaml``): kueueweb keeps the set and its Pods'
rows, and each admitted group's Pods go to the cluster as Pods, ungated with the placement of
their pod set; scaling down deletes a group's Pods there and frees its quota; an evicted
group's Pods are deleted and come back once it is admitted again."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, leaderworkersets, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import leaderworkerset as lws
from scheduling.models import FlavorQuota, Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("enabled")]

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-leaderworkerset.yaml")
NAME = "nginx-leaderworkerset"
GROUP_PODS = {0: [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"],
              1: [f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"]}


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], lws.FRAMEWORK_NAME]}


@pytest.fixture
def domain(kube_api: Any, user_queue_domain: Cluster) -> Cluster:
    """``user-queue`` on the Kubernetes cluster's domain (a spot flavor with node labels),
    with CPU for the sample's two groups (each 100m + 2 × 200m) and no more."""
    kube_api.require_fake()
    FlavorQuota.objects.filter(cluster_queue__cluster=user_queue_domain,
                               resource="cpu").update(nominal_quota="1")
    return user_queue_domain


def submit(kube_api: Any, domain: Cluster, *, name: str = NAME,
           replicas: int | None = None) -> Job:
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["name"] = name
    if replicas is not None:
        manifest["spec"]["replicas"] = replicas
    return services.submit_job(manifest, namespace=kube_api.namespace, cluster=domain)


def sync_set(job: Job, at: datetime) -> None:
    leaderworkersets.sync_leaderworkerset(job.pk, now=at)


def groups(job: Job) -> dict[int, Workload]:
    return leaderworkersets.group_workloads(job)


def remote_pods(kube_api: Any) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube_api.objects("pods", kube_api.namespace)}


def run_pods(kube_api: Any, names: list[str]) -> None:
    for name in names:
        kube_api.set_pod(kube_api.namespace, name, phase="Running", ready=True)


def running_sample(kube_api: Any, domain: Cluster, t0: datetime) -> Job:
    """The sample's two groups admitted, on the cluster, and their Pods running and ready."""
    job = submit(kube_api, domain)
    sync_set(job, t0)
    admission.run_admission_cycle(domain.pk, now=t0)
    assert {i: wl.phase for i, wl in groups(job).items()} == {
        0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED}
    sync_kube_cluster(domain.pk, now=t0)
    run_pods(kube_api, GROUP_PODS[0] + GROUP_PODS[1])
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
    sync_set(job, t0 + timedelta(seconds=5))
    return job


def test_each_admitted_group_runs_as_pods_with_its_pod_sets_placement(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = submit(kube_api, domain)
    sync_set(job, t0)
    admission.run_admission_cycle(domain.pk, now=t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{NAME}"]
    remote = remote_pods(kube_api)
    assert sorted(remote) == sorted(GROUP_PODS[0] + GROUP_PODS[1])
    members = {m.name: m for m in leaderworkersets.owned_pods(job)}
    for index, names in GROUP_PODS.items():
        wl = groups(job)[index]
        for name, role in zip(names, ("leader", "worker", "worker"), strict=True):
            pod = remote[name]
            labels = pod["metadata"]["labels"]
            assert labels[ORIGIN_LABEL] == "multikueue"
            assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == wl.name
            assert labels[jobframework.PODSET_LABEL] == role
            assert labels[jobframework.JOB_UID_LABEL] == str(members[name].uid)
            assert labels[lws.GROUP_INDEX_LABEL] == str(index)
            assert "schedulingGates" not in pod["spec"]
            assert pod["spec"]["nodeSelector"] == {"instance-type": "spot"}
            # The set lives in kueueweb only: nothing on the cluster owns its Pods.
            assert "ownerReferences" not in pod["metadata"]
    assert remote[f"{NAME}-0"]["spec"]["containers"][0]["name"] == "nginx-leader"
    assert remote[f"{NAME}-0-1"]["spec"]["containers"][0]["name"] == "nginx-worker"
    assert not kube_api.requests_to("POST", "/apis/leaderworkerset.x-k8s.io")

    run_pods(kube_api, GROUP_PODS[0] + GROUP_PODS[1])
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
    sync_set(job, t0 + timedelta(seconds=5))

    for wl in groups(job).values():
        assert wl.phase == WorkloadPhase.ADMITTED
        assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert job.status["readyReplicas"] == 2
    assert cond.is_true(job.status["conditions"], "Available")
    assert not job.suspend
    # Serving: nothing finishes, nothing is deleted.
    later = sync_kube_cluster(domain.pk, now=t0 + timedelta(minutes=10))
    assert (later.finished, later.deleted) == ([], [])


def test_a_groups_members_share_one_gang_with_a_pod_group_per_role(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.serve_gang_api = True
    job = running_sample(kube_api, domain, t0)

    gangs = {w["metadata"]["name"]: w for w in kube_api.objects("workloads", kube_api.namespace)}
    remote = remote_pods(kube_api)
    expected = {}
    for index, names in GROUP_PODS.items():
        gang = f"pod-{groups(job)[index].name}"
        expected[gang] = names
        for name, role in zip(names, ("leader", "worker", "worker"), strict=True):
            assert remote[name]["spec"]["workloadRef"] == {"name": gang, "podGroup": role}
    assert sorted(gangs) == sorted(expected)
    for gang, names in expected.items():
        assert gangs[gang]["spec"] == {"podGroups": [
            {"name": "leader", "policy": {"gang": {"minCount": 1}}},
            {"name": "worker", "policy": {"gang": {"minCount": 2}}}]}
        owners = gangs[gang]["metadata"]["ownerReferences"]
        assert [o["name"] for o in owners] == names
        assert [o["uid"] for o in owners] == [remote[n]["metadata"]["uid"] for n in names]
        assert not any(o["controller"] for o in owners)

    # One member going leaves its group's gang to the others; the last one takes it along.
    group_zero = f"pod-{groups(job)[0].name}"
    kube_api.delete("pods", kube_api.namespace, f"{NAME}-0-2")
    assert kube_api.get("workloads", kube_api.namespace, group_zero) is not None
    services.evict_workload(groups(job)[0], now=t0 + timedelta(seconds=10))
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))
    assert kube_api.get("workloads", kube_api.namespace, group_zero) is None
    assert kube_api.get("workloads", kube_api.namespace, f"pod-{groups(job)[1].name}")


def test_scaling_down_deletes_a_groups_pods_on_the_cluster_and_frees_its_quota(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = running_sample(kube_api, domain, t0)
    other = submit(kube_api, domain, name="other", replicas=1)
    sync_set(other, t0 + timedelta(seconds=6))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=6))
    [waiting] = groups(other).values()
    assert waiting.phase == WorkloadPhase.PENDING  # both groups of the sample hold the CPU
    gone = groups(job)[1].name

    leaderworkersets.scale_leaderworkerset(job, 1)
    sync_set(job, t0 + timedelta(seconds=7))
    scaled = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=7))

    assert sorted(scaled.deleted) == sorted(f"{kube_api.namespace}/{n}" for n in GROUP_PODS[1])
    assert sorted(remote_pods(kube_api)) == GROUP_PODS[0]
    assert not Workload.objects.filter(name=gone).exists()
    assert list(groups(job)) == [0]
    # The quota the group held admits the other set's group.
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=8))
    waiting.refresh_from_db()
    assert waiting.phase == WorkloadPhase.ADMITTED
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=8))
    assert sorted(remote_pods(kube_api)) == sorted(
        [*GROUP_PODS[0], "other-0", "other-0-1", "other-0-2"])


def test_an_evicted_group_leaves_the_cluster_and_returns_once_admitted_again(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = running_sample(kube_api, domain, t0)
    before = {m.name: m.uid for m in leaderworkersets.owned_pods(job)}
    evicted = groups(job)[0]

    services.evict_workload(evicted, now=t0 + timedelta(seconds=10))
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    assert sorted(stopped.deleted) == sorted(f"{kube_api.namespace}/{n}" for n in GROUP_PODS[0])
    assert sorted(remote_pods(kube_api)) == GROUP_PODS[1]
    evicted.refresh_from_db()
    assert evicted.phase == WorkloadPhase.PENDING
    assert not cond.is_true(evicted.conditions, "QuotaReserved")
    assert groups(job)[1].phase == WorkloadPhase.ADMITTED
    job.refresh_from_db()
    assert not job.suspend  # the other group still runs

    # The set replaces the Pods Kueue stopped; the group is admitted again and runs anew.
    sync_set(job, t0 + timedelta(seconds=12))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=12))
    evicted.refresh_from_db()
    assert evicted.phase == WorkloadPhase.ADMITTED
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))

    remote = remote_pods(kube_api)
    assert sorted(remote) == sorted(GROUP_PODS[0] + GROUP_PODS[1])
    after = {m.name: m.uid for m in leaderworkersets.owned_pods(job)}
    for name in GROUP_PODS[0]:
        assert after[name] != before[name]
        labels = remote[name]["metadata"]["labels"]
        assert labels[jobframework.JOB_UID_LABEL] == str(after[name])
        assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == evicted.name
        assert "schedulingGates" not in remote[name]["spec"]
    for name in GROUP_PODS[1]:
        assert after[name] == before[name]
    run_pods(kube_api, GROUP_PODS[0])
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=15))
    evicted.refresh_from_db()
    assert cond.is_true(evicted.conditions, "PodsReady")


def test_deleting_the_set_deletes_its_pods_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = running_sample(kube_api, domain, t0)

    services.delete_job(job)
    cleaned = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    assert sorted(cleaned.deleted) == sorted(
        f"{kube_api.namespace}/{n}" for n in GROUP_PODS[0] + GROUP_PODS[1])
    assert remote_pods(kube_api) == {}
    assert not Workload.objects.filter(name__startswith=f"leaderworkerset-{NAME}-").exists()
    assert cleaned.started == []
