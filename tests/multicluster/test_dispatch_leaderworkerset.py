"""A LeaderWorkerSet through MultiKueue, with simulated workers (Kueue's multi-Workload
adapter): its group Workloads are dispatched once all exist, the lowest index chooses the
worker and the others follow it there; the worker gets a copy of the set that names its
groups' Workloads as the hub does and creates none of its own, and runs the groups' Pods."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.models import Cluster, Pod
from multicluster.simulated import runner
from scheduling import leaderworkersets, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import leaderworkerset as lws
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from tests.multicluster.test_dispatch import Everything, at, check_state, hub, t0

pytestmark = pytest.mark.django_db
__all__ = ["hub", "t0"]  # the fixtures of the MultiKueue demo

SAMPLE = (Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-leaderworkerset.yaml")
NAME = "nginx-leaderworkerset"


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], lws.FRAMEWORK_NAME]}


class WithSets(Everything):
    """Every reconciler, the LeaderWorkerSets' of every domain and MultiKueue's garbage
    collector among them."""

    def step(self, now: datetime, *, rounds: int = 4) -> None:
        for _ in range(rounds):
            leaderworkersets.sync_all(now=now)
            super().step(now, rounds=1)
            dispatch.collect_garbage(now=now)


def submit(hub: Cluster) -> Job:
    Job.objects.all().delete()
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "multikueue-queue"
    return services.submit_job(manifest, namespace="research", cluster=hub)


def hub_groups(job: Job) -> dict[int, Workload]:
    return leaderworkersets.group_workloads(job)


def running(everything: WithSets, hub: Cluster, t0: datetime) -> tuple[Job, Cluster, Job]:
    """The sample submitted on the hub and run on a worker for 5 seconds: the hub's set, the
    worker that runs it, and the worker's set."""
    job = submit(hub)
    everything.step(t0)
    everything.step(at(t0, 5))
    winner = Cluster.objects.get(name=hub_groups(job)[0].cluster_name)
    return job, winner, Job.objects.get(cluster=winner, kind="LeaderWorkerSet")


def worker_copies() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for wl in Workload.objects.filter(cluster__role=ClusterRole.WORKER).select_related(
            "cluster").order_by("name"):
        found.setdefault(wl.cluster.name, []).append(wl.name)
    return found


@pytest.mark.usefixtures("enabled")
def test_the_groups_go_to_one_worker_once_all_exist_the_primary_choosing_it(
    hub: Cluster, t0: datetime,
) -> None:
    job = submit(hub)
    leaderworkersets.sync_leaderworkerset(job.pk, now=t0)
    names = {i: wl.name for i, wl in hub_groups(job).items()}
    # Group 1's Workload is gone for a moment: group 0, admitted on the hub, waits for it.
    Workload.objects.filter(name=names[1]).delete()
    admission.run_admission_cycle(hub.pk, now=t0)
    assert hub_groups(job)[0].phase == WorkloadPhase.QUOTA_RESERVED
    dispatch.sync_dispatch(hub.pk, now=t0)
    assert worker_copies() == {}

    # Both exist: the primary (group 0) is nominated to every worker, group 1 to none.
    leaderworkersets.sync_leaderworkerset(job.pk, now=at(t0, 1))
    admission.run_admission_cycle(hub.pk, now=at(t0, 1))
    assert {i: wl.phase for i, wl in hub_groups(job).items()} == {
        0: WorkloadPhase.QUOTA_RESERVED, 1: WorkloadPhase.QUOTA_RESERVED}
    dispatch.sync_dispatch(hub.pk, now=at(t0, 1))
    assert worker_copies() == {"worker-1": [names[0]], "worker-2": [names[0]]}
    assert hub_groups(job)[1].nominated_cluster_names == []

    # worker-2 admits group 0 first: it wins, and group 1 goes there only.
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=at(t0, 2))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 2))
    primary = hub_groups(job)[0]
    assert primary.cluster_name == "worker-2"
    assert check_state(primary)["state"] == "Ready"
    assert worker_copies() == {"worker-2": [names[0], names[1]]}
    assert hub_groups(job)[1].nominated_cluster_names == ["worker-2"]
    remote_set = Job.objects.get(cluster=w2, kind="LeaderWorkerSet")
    metadata = remote_set.manifest["metadata"]
    assert metadata["labels"][dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"
    assert metadata["annotations"][lws.MULTIKUEUE_ORIGIN_UID_ANNOTATION] == str(job.uid)
    assert metadata["uid"] != str(job.uid)
    assert remote_set.manifest["spec"] == job.manifest["spec"]

    admission.run_admission_cycle(w2.pk, now=at(t0, 3))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 3))
    second = hub_groups(job)[1]
    assert second.cluster_name == "worker-2"
    assert second.phase == WorkloadPhase.ADMITTED


@pytest.mark.usefixtures("enabled")
def test_the_worker_runs_the_groups_pods_on_the_hubs_workloads_and_makes_none(
    hub: Cluster, t0: datetime,
) -> None:
    everything = WithSets()
    job, winner, remote_set = running(everything, hub, t0)

    groups = hub_groups(job)
    assert {wl.cluster_name for wl in groups.values()} == {winner.name}
    assert {wl.phase for wl in groups.values()} == {WorkloadPhase.ADMITTED}
    # The worker's set names its groups' Workloads as the hub does and makes none itself.
    on_worker = {i: wl.name for i, wl in leaderworkersets.group_workloads(remote_set).items()}
    assert on_worker == {i: wl.name for i, wl in groups.items()}
    assert sorted(Workload.objects.filter(cluster=winner).values_list("name", flat=True)) == (
        sorted(on_worker.values()))
    members = leaderworkersets.owned_pods(remote_set)
    assert sorted(m.name for m in members) == sorted(
        [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2", f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"])
    assert {m.group_name for m in members} == set(on_worker.values())
    assert Pod.objects.filter(cluster=winner).count() == 6
    assert not Pod.objects.filter(cluster=hub).exists()  # the hub's pods stay gated
    assert all(p.suspend for p in leaderworkersets.owned_pods(job))
    remote_set.refresh_from_db()
    assert remote_set.status["readyReplicas"] == 2
    # No status comes back: the hub's set has its own controller's.
    job.refresh_from_db()
    assert job.status["readyReplicas"] == 0
    loser = Cluster.objects.exclude(pk__in=[hub.pk, winner.pk]).get(role=ClusterRole.WORKER)
    assert not Job.objects.filter(cluster=loser).exists()
    assert not Workload.objects.filter(cluster=loser).exists()

    # Scaled down on the hub: the group's copy and its Pods leave the worker.
    leaderworkersets.scale_leaderworkerset(job, 1)
    everything.step(at(t0, 10))
    assert sorted(Workload.objects.filter(cluster=winner).values_list("name", flat=True)) == [
        on_worker[0]]
    assert sorted(m.name for m in leaderworkersets.owned_pods(remote_set)) == [
        f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"]
    assert Pod.objects.filter(cluster=winner).count() == 3

    # Deleted on the hub: the set and its Pods go from the worker.
    services.delete_job(job)
    everything.step(at(t0, 15))
    assert not Job.objects.filter(cluster=winner).exists()
    assert not Workload.objects.filter(cluster=winner).exists()
    assert not Pod.objects.filter(cluster=winner).exists()


@pytest.mark.usefixtures("enabled")
def test_an_evicted_primary_comes_back_to_the_worker_of_the_other_groups(
    hub: Cluster, t0: datetime,
) -> None:
    everything = WithSets()
    job, winner, remote_set = running(everything, hub, t0)
    before = {m.name: m.uid for m in leaderworkersets.owned_pods(remote_set)}

    services.evict_workload(hub_groups(job)[0], now=at(t0, 6))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 6))

    # Its copy and its group's Pods left the worker; the other group runs on.
    primary, other = hub_groups(job)[0], hub_groups(job)[1]
    assert worker_copies() == {winner.name: [other.name]}
    assert sorted(m.name for m in leaderworkersets.owned_pods(remote_set)) == [
        f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"]
    assert Job.objects.filter(pk=remote_set.pk).exists()

    # Its quota back and admitted again on the hub, it goes to that worker only.
    runner.sync_cluster(hub.pk, now=at(t0, 7))
    admission.run_admission_cycle(hub.pk, now=at(t0, 7))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 7))
    primary.refresh_from_db()
    assert primary.phase == WorkloadPhase.QUOTA_RESERVED
    assert primary.nominated_cluster_names == [winner.name]
    assert worker_copies() == {winner.name: sorted([primary.name, other.name])}

    everything.step(at(t0, 7))
    everything.step(at(t0, 12))

    primary.refresh_from_db()
    other.refresh_from_db()
    assert primary.phase == WorkloadPhase.ADMITTED
    assert primary.cluster_name == other.cluster_name == winner.name
    assert worker_copies() == {winner.name: sorted([primary.name, other.name])}
    after = {m.name: m.uid for m in leaderworkersets.owned_pods(remote_set)}
    assert sorted(after) == sorted(before)
    assert all(after[n] != before[n] for n in (f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"))
    assert all(after[n] == before[n] for n in (f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"))
    assert Pod.objects.filter(cluster=winner).count() == 6
